"""The ColBERT network (backbone + bias-free projection) and its checkpoint folder format.

A checkpoint folder holds::

    colbert_config.json        the ColBERTConfig
    projection.safetensors     {"weight": [dim, hidden]}
    backbone/                  the encoder and its tokenizer (transformers' save_pretrained; markers included)
    manifest.json              {"files": {path: {"size", "xxh3_128", "blocks"}}} of every file above (written last)

Loading checks every manifest file's size and checksum (the backbone's weights too: they are read whole), that the
backbone's config and tokenizer are there, and that every weight is finite; :func:`verify_checkpoint` checks every
checksum without building the model. A checkpoint without ``manifest.json`` (saved before manifests existed) is
refused unless loaded with ``unchecked=True`` (then with a warning, and the other checks only).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple, Union, cast

import torch
from torch import nn

from ..storage import (
    ArtifactIntegrity,
    DamagedFileError,
    MissingFileError,
    atomic_folder,
    build_manifest,
    folder_files,
    parse_manifest,
    raise_damaged,
    read_json,
    write_json,
)
from . import fast_bert
from .config import CONFIG_FILE, ColBERTConfig, default_backbone
from .light_tokenizer import load_tokenizer
from .tokenization import ColBERTTokenizer

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedModel

PROJECTION_FILE = "projection.safetensors"
BACKBONE_DIR = "backbone"
MANIFEST_FILE = "manifest.json"
#: a backbone folder needs one of these to have a tokenizer
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
#: backbone weight files: checked whole when the backbone is loaded (the other files first, on open)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".h5", ".msgpack")
_WHAT = "ColBERT checkpoint"
_REMEDY = "save or download the checkpoint again"


class ColBERTModel(nn.Module):
    """Backbone hidden states → linear map (no bias) to ``dim`` → optional L2 normalisation."""

    def __init__(self, backbone: "PreTrainedModel", config: ColBERTConfig):
        super().__init__()
        check_positions(backbone, config)
        self.config = config
        self.backbone: PreTrainedModel = backbone
        self.projection = nn.Linear(backbone.config.hidden_size, config.dim, bias=False)
        #: whether evaluation passes skip transformers' module overhead (:mod:`.fast_bert`; BERT backbones only)
        self.fast_inference = fast_bert.supports(backbone)
        #: the packed bfloat16 pass (:class:`~.fast_bert.PackedBert`) of an inference copy (:func:`bf16_copy`)
        self.packed: Optional[fast_bert.PackedBert] = None

    def init_projection(self, seed: int = 0) -> None:
        """A fresh projection: orthonormal rows keep the backbone's angles (as far as ``dim`` allows)."""
        gen = torch.Generator().manual_seed(seed)
        hidden = self.projection.in_features
        if self.config.projection_init == "orthogonal":
            m = torch.randn(max(hidden, self.config.dim), max(hidden, self.config.dim), generator=gen)
            q, _ = torch.linalg.qr(m)
            w = q[: self.config.dim, :hidden]
        else:
            w = torch.randn(self.config.dim, hidden, generator=gen) / hidden ** 0.5
        with torch.no_grad():
            self.projection.weight.copy_(w.to(self.projection.weight.dtype))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                on_layer: Optional[Callable[[], None]] = None) -> torch.Tensor:
        return self.head(self.hidden(input_ids, attention_mask, on_layer))

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               on_layer: Optional[Callable[[], None]] = None) -> torch.Tensor:
        """The backbone's last hidden states ``[B, L, hidden]``; ``on_layer()`` is called after each encoder layer
        (transformers backbones: through forward hooks on ``encoder.layer``, removed after the pass)."""
        if self.packed is not None and not self.training:
            return self.packed(input_ids, attention_mask, on_layer)
        if self.fast_inference and not self.training:
            return fast_bert.forward(self.backbone, input_ids, attention_mask, on_layer)
        hooks = []
        if on_layer is not None:
            encoder: Any = getattr(self.backbone, "encoder", None)
            hooks = [layer.register_forward_hook(lambda *_: on_layer()) for layer in getattr(encoder, "layer", ())]
        try:
            return self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        finally:
            for hook in hooks:
                hook.remove()

    def num_layers(self) -> int:
        """How many times :meth:`hidden` calls ``on_layer`` (the backbone's encoder layers; 0 when it has none
        that can be seen)."""
        encoder: Any = getattr(self.backbone, "encoder", None)
        return len(getattr(encoder, "layer", ()))

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The backbone's last hidden states ``[B, L, hidden]`` → token embeddings ``[B, L, dim]``."""
        out = self.projection(hidden.to(self.projection.weight.dtype))
        if self.config.normalise:
            out = nn.functional.normalize(out, p=2.0, dim=-1)
        return out


def max_positions(backbone: "PreTrainedModel") -> Optional[int]:
    """The longest input the backbone's position embeddings cover: ``max_position_embeddings`` less the offset of
    RoBERTa-style embeddings (whose positions start after the padding index); None when the config has no limit."""
    limit = getattr(backbone.config, "max_position_embeddings", None)
    if not isinstance(limit, int) or isinstance(limit, bool):
        return None
    padding_idx = getattr(getattr(backbone, "embeddings", None), "padding_idx", None)
    if isinstance(padding_idx, int) and hasattr(backbone.embeddings, "position_embeddings"):
        limit -= padding_idx + 1
    return limit


def check_positions(backbone: "PreTrainedModel", config: ColBERTConfig) -> None:
    """Refuse lengths the backbone cannot encode (its position embeddings would be indexed past their end)."""
    limit = max_positions(backbone)
    too_long = [f"{name}={getattr(config, name)}" for name in ("query_maxlen", "doc_maxlen")
                if limit is not None and getattr(config, name) > limit]
    if too_long:
        raise ValueError(f"{' and '.join(too_long)} exceed the {type(backbone).__name__} backbone's {limit} positions "
                         f"(max_position_embeddings={backbone.config.max_position_embeddings}); expected at most "
                         f"{limit} tokens")


def int8_copy(model: ColBERTModel) -> ColBERTModel:
    """An inference copy of ``model`` whose backbone Linear layers are int8 (torch's dynamic quantization: int8
    weights per output row, activations quantized per batch as they come); embeddings, layer norms, attention
    and the projection stay float32. ``model`` is not changed.

    torch marks its eager quantization API as deprecated (in favour of torchao, not a dependency here); it is still
    in the pinned torch, and its deprecation warnings are silenced for this one call."""
    import copy

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    clone = copy.deepcopy(model).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        clone.backbone = quantize_dynamic(clone.backbone, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8,
                                        inplace=True)
    clone.fast_inference = fast_bert.supports(clone.backbone)
    return clone


def bf16_linears(model: ColBERTModel) -> List[nn.Parameter]:
    """The weights and biases of ``model``'s backbone Linear layers: what :func:`bf16_copy` holds in bfloat16."""
    return [p for m in model.backbone.modules() if type(m) is nn.Linear for p in m.parameters()]


def bf16_copy(model: ColBERTModel) -> ColBERTModel:
    """An inference copy of ``model`` whose backbone Linear layers hold bfloat16 weights and biases; every other
    tensor (embeddings, layer norms, the projection) is ``model``'s own, shared, not copied. Under CPU bfloat16
    autocast it computes exactly what ``model`` does there (autocast rounds each weight to bfloat16 the same way),
    without rounding all the weights again on every forward pass: for one short query that rounding made bf16
    slower than float32 (docs/app.md, "Query latency"). A BERT backbone's copy also runs the packed pass
    (:class:`~.fast_bert.PackedBert`: the same vectors, weights laid out once) where this torch build has it.
    ``model`` is not changed; a change to its Linear weights (their ``_version``, :func:`bf16_linears`) calls for a
    new copy."""
    import copy

    own = {id(p) for p in bf16_linears(model)}
    memo: Dict[int, Any] = {id(t): t for t in (*model.parameters(), *model.buffers()) if id(t) not in own}
    clone = copy.deepcopy(model, memo).eval()
    for m in clone.backbone.modules():
        if type(m) is nn.Linear:
            m.to(torch.bfloat16)
    clone.packed = fast_bert.pack(clone.backbone) if clone.fast_inference else None
    return clone


def build(backbone: Optional[str], config: ColBERTConfig, seed: int = 0) -> Tuple[ColBERTModel, ColBERTTokenizer]:
    """A fresh (untrained) ColBERT over a BERT/RoBERTa backbone folder (or hub id, if online)."""
    from transformers import AutoTokenizer

    source = backbone or config.backbone or default_backbone()
    config = config.replace(backbone=str(source))
    hf_tok = AutoTokenizer.from_pretrained(source, use_fast=True)
    net = _load_backbone(source, local_files_only=False)
    added = ColBERTTokenizer.add_marker_tokens(hf_tok, config)
    if added:
        net.resize_token_embeddings(len(hf_tok))
    model = ColBERTModel(net.float(), config)
    model.init_projection(seed)
    return model, ColBERTTokenizer(hf_tok, config)


def _load_backbone(source, local_files_only: bool) -> "PreTrainedModel":
    """The bare encoder; BERT-family poolers are left out (unused, and randomly initialised when absent)."""
    from transformers import AutoConfig, AutoModel

    kind = AutoConfig.from_pretrained(source, local_files_only=local_files_only).model_type
    extra = {"add_pooling_layer": False} if kind in ("bert", "roberta", "xlm-roberta") else {}
    with _quiet_transformers():
        return AutoModel.from_pretrained(source, local_files_only=local_files_only, **extra)


def _light_backbone(folder: Path) -> Optional["PreTrainedModel"]:
    """The BERT backbone without transformers' model classes, or None (:mod:`.light_bert`). It stands in for a
    PreTrainedModel where this module uses one: ``config``, ``get_input_embeddings``, the weights."""
    from . import light_bert

    return cast("Optional[PreTrainedModel]", light_bert.load(folder))


@contextlib.contextmanager
def _quiet_transformers():
    """Silence transformers' load report and weight-loading bar for one call, restoring its settings after."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def save(model: ColBERTModel, tokenizer: ColBERTTokenizer, folder: Union[str, Path],
         dtype: Optional[torch.dtype] = None) -> Path:
    """Write a checkpoint folder atomically (temp folder, then rename). ``dtype`` casts stored weights.

    An existing checkpoint at ``folder`` is replaced; anything else there (a file, a folder of other files) is
    refused before anything is written.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    refuse_non_finite(model.state_dict().items(), "the model to save", "save refused: nothing was written")
    with atomic_folder(folder, overwrite=True, replaceable=is_checkpoint, what="ColBERT checkpoint folder") as tmp:
        backbone = model.backbone
        if dtype is not None:
            backbone = _copy_as(backbone, dtype)
        with _quiet_transformers():  # no "Writing model shards" bar
            backbone.save_pretrained(tmp / BACKBONE_DIR, safe_serialization=True)
        tokenizer.hf.save_pretrained(tmp / BACKBONE_DIR)
        weight = model.projection.weight.detach().to("cpu", dtype or model.projection.weight.dtype).contiguous()
        save_file({"weight": weight}, str(tmp / PROJECTION_FILE))
        model.config.save(tmp)
        write_json(tmp / MANIFEST_FILE, {"files": build_manifest(tmp, folder_files(tmp))})
    return folder


def refuse_non_finite(tensors: Iterable[Tuple[str, torch.Tensor]], where: str, remedy: str,
                      path: Optional[Path] = None) -> None:
    """Raise naming the first floating-point tensor of ``(name, tensor)`` with NaN or inf values.

    >>> refuse_non_finite([("w", torch.tensor([1.0, float("nan")]))], "the model", "retrain it")
    Traceback (most recent call last):
    ...
    ValueError: tensor 'w' of the model holds 1 NaN/inf value(s) of 2; retrain it
    """
    for name, tensor in tensors:
        if tensor.is_floating_point() and tensor.numel():
            finite = torch.isfinite(tensor)
            if not bool(finite.all()):
                message = (f"tensor {name!r} of {where} holds {int((~finite).sum())} NaN/inf value(s) of "
                           f"{tensor.numel()}; {remedy}")
                raise DamagedFileError(path, message) if path is not None else ValueError(message)


def _is_weight_file(name: str) -> bool:
    return name.startswith(BACKBONE_DIR + "/") and name.endswith(_WEIGHT_SUFFIXES)


def read_manifest(folder: Union[str, Path]) -> Optional[Dict[str, Dict[str, Any]]]:
    """The checkpoint's manifest (``manifest.json``), or None for a checkpoint written before manifests."""
    path = Path(folder) / MANIFEST_FILE
    if not path.exists():
        return None
    values = read_json(path, "checkpoint manifest")
    return parse_manifest(values.get("files") if isinstance(values, dict) else None, path)


def required_files(folder: Union[str, Path]) -> List[str]:
    """The files a checkpoint's manifest must list: its config and projection, and every file of its backbone
    folder (weights, config, tokenizer: all read when it loads)."""
    bb = Path(folder) / BACKBONE_DIR
    backbone = [f"{BACKBONE_DIR}/{name}" for name in folder_files(bb)] if bb.is_dir() else []
    return [CONFIG_FILE, PROJECTION_FILE, f"{BACKBONE_DIR}/config.json", *backbone]


def integrity_of(folder: Union[str, Path], unchecked: bool = False) -> ArtifactIntegrity:
    """The checkpoint's integrity base over ``manifest.json`` (refused without one unless ``unchecked``, and when
    it lacks a file the checkpoint needs: :func:`required_files`)."""
    folder = Path(folder)
    return ArtifactIntegrity(folder, read_manifest(folder), what=_WHAT, remedy=_REMEDY,
                             source=folder / MANIFEST_FILE, unchecked=unchecked, required=required_files(folder))


def _check_files(folder: Path, unchecked: bool = False) -> ArtifactIntegrity:
    """The checks before loading: the files every checkpoint needs, every manifest file's size and the small
    files' checksums. Returns the integrity base (whose :meth:`~ArtifactIntegrity.check_whole` then checks the
    weights before they are read)."""
    integrity = integrity_of(folder, unchecked)
    _check_required(folder)
    if integrity.files is not None:
        integrity.check_open([n for n in integrity.files if not _is_weight_file(n)])
    return integrity


def _check_required(folder: Path) -> None:
    """The files every checkpoint needs: the backbone's config, a tokenizer, the projection."""
    bb = folder / BACKBONE_DIR
    if not bb.is_dir():
        raise MissingFileError(bb, f"{bb} not found: a checkpoint folder needs the backbone saved under "
                                   f"{BACKBONE_DIR}/; {_REMEDY}")
    for required in (PROJECTION_FILE, f"{BACKBONE_DIR}/config.json"):
        if not (folder / required).is_file():
            raise MissingFileError(folder / required, f"{folder / required} is missing: the {_WHAT} at {folder} is "
                                                      f"incomplete; {_REMEDY}")
    if not any((bb / name).is_file() for name in TOKENIZER_FILES):
        raise MissingFileError(bb / TOKENIZER_FILES[0], f"{bb / TOKENIZER_FILES[0]} is missing: the backbone in {bb} "
                                                        f"has no tokenizer (none of {list(TOKENIZER_FILES)}); "
                                                        f"{_REMEDY}")


def _weights_file(bb: Path) -> Path:
    """The backbone's (first) weight file, to name in errors."""
    found = sorted(p for p in bb.iterdir() if p.name.endswith(_WEIGHT_SUFFIXES))
    return found[0] if found else bb


def _load_safetensors(path: Path) -> Dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except FileNotFoundError:
        raise MissingFileError(path, f"{path} is missing; {_REMEDY}") from None
    except Exception as err:  # safetensors raises its own SafetensorError (and OSError) on damaged files
        raise DamagedFileError(path, f"{path} is damaged: not a readable safetensors file ({err}); "
                                     f"{_REMEDY}") from None


def embedding_rows(net: "PreTrainedModel") -> int:
    """Rows of the backbone's input embedding table (the vocabulary it was loaded with)."""
    embeddings = net.get_input_embeddings()
    if not isinstance(embeddings, nn.Embedding):
        raise TypeError(f"{type(net).__name__}'s input embeddings are a {type(embeddings).__name__}, expected an "
                        "nn.Embedding")
    return embeddings.num_embeddings


def _copy_as(module: "PreTrainedModel", dtype: torch.dtype) -> "PreTrainedModel":
    import copy

    # transformers wraps PreTrainedModel.to in a decorator whose signature mypy reads as unbound
    return copy.deepcopy(module).to(dtype)  # type: ignore[arg-type]


def load(folder: Union[str, Path], unchecked: bool = False, *, light: bool = False
         ) -> Tuple[ColBERTModel, ColBERTTokenizer]:
    """Load a checkpoint folder, offline only, in fp32. Config/weight mismatches are errors; so is a folder
    without ``manifest.json`` unless ``unchecked``. ``light``: a BERT backbone is read without transformers'
    model classes (:mod:`.light_bert`; inference only), others as before, and the tokenizer with ``tokenizers``
    alone where that gives transformers' ids (:mod:`.light_tokenizer`), else with transformers."""
    folder = Path(folder)
    config = ColBERTConfig.load(folder)
    integrity = _check_files(folder, unchecked)
    if integrity.files is not None:  # the weights are read whole next: their checksums first
        integrity.check_whole([n for n in integrity.files if _is_weight_file(n)])
    bb = folder / BACKBONE_DIR
    try:
        hf_tok = load_tokenizer(bb, light=light)
    except Exception as err:  # tokenizers/transformers raise many kinds on damaged files
        raise DamagedFileError(bb, f"the tokenizer in {bb} cannot be loaded ({type(err).__name__}: {err}); "
                                   f"{_REMEDY}") from None
    try:
        net = (light and _light_backbone(bb)) or _load_backbone(bb, local_files_only=True)
    except Exception as err:
        weights = _weights_file(bb)
        lines = str(err).strip().splitlines() or [""]  # one line: torch's refusal of a pickle runs to paragraphs
        why = lines[-1].strip() if "Weights only load failed" in lines[0] else lines[0].strip()
        raise DamagedFileError(weights, f"the backbone in {bb} cannot be loaded ({type(err).__name__}: {why}); "
                                        f"check {bb / 'config.json'} and {weights.name}; {_REMEDY}") from None
    refuse_non_finite(net.state_dict().items(), f"the backbone ({_weights_file(bb)})", _REMEDY, _weights_file(bb))
    if embedding_rows(net) < len(hf_tok):
        raise ValueError(f"{folder}: the tokenizer has {len(hf_tok)} tokens but the backbone's embeddings only "
                         f"{embedding_rows(net)}; the checkpoint is inconsistent")
    try:
        model = ColBERTModel(net.float(), config)
    except ValueError as err:
        raise ValueError(f"{folder / CONFIG_FILE}: {err}") from None
    state = _load_safetensors(folder / PROJECTION_FILE)
    refuse_non_finite(state.items(), str(folder / PROJECTION_FILE), _REMEDY, folder / PROJECTION_FILE)
    if set(state) != {"weight"}:
        raise ValueError(f"{folder / PROJECTION_FILE}: expected a single tensor 'weight', found {sorted(state)}")
    want = tuple(model.projection.weight.shape)
    if tuple(state["weight"].shape) != want:
        raise ValueError(f"{folder}: {CONFIG_FILE} says dim={config.dim} over a {want[1]}-wide backbone, so the "
                         f"projection should be {list(want)}, but {PROJECTION_FILE} holds "
                         f"{list(state['weight'].shape)}; the config does not match the weights")
    with torch.no_grad():
        model.projection.weight.copy_(state["weight"].float())
    return model, ColBERTTokenizer(hf_tok, config)


def verify_checkpoint(folder: Union[str, Path], unchecked: bool = False) -> Dict[str, Any]:
    """Full content check of a checkpoint folder without building the model: every file's checksum against
    ``manifest.json``, the config, and every safetensors file readable with finite tensors. Raises
    :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming each damaged file; returns what was
    checked (``{"files", "bytes", "seconds"}``). A checkpoint without a manifest is refused
    (:class:`~pyterrier_fandom_colbert.storage.NoManifestError`); ``unchecked=True`` gives it the other checks
    and a warning."""
    started = time.perf_counter()
    folder = Path(folder)
    if not is_checkpoint(folder):
        raise MissingFileError(folder / CONFIG_FILE, f"{folder / CONFIG_FILE} not found: {folder} is not a ColBERT "
                                                     "checkpoint")
    ColBERTConfig.load(folder)
    integrity = integrity_of(folder, unchecked)
    files = integrity.files
    problems: List[Tuple[str, str]] = integrity.problems()
    names = folder_files(folder) if files is None else list(files)
    for name in names:
        if name.endswith(".safetensors") and name not in dict(problems) and (folder / name).is_file():
            try:
                tensors = _load_safetensors(folder / name)
                refuse_non_finite(tensors.items(), str(folder / name), _REMEDY, folder / name)
            except DamagedFileError as err:
                problems.append((name, str(err)))
    try:
        _check_required(folder)
    except DamagedFileError as err:
        problems.append((err.path.relative_to(folder).as_posix(), str(err)))
    raise_damaged(folder, problems, what=_WHAT, remedy=_REMEDY)
    return {"files": sorted(files or names), "bytes": sum(e["size"] for e in (files or {}).values()),
            "seconds": round(time.perf_counter() - started, 3)}


def is_checkpoint(folder: Union[str, Path]) -> bool:
    """Whether ``folder`` is a checkpoint folder (holds ``colbert_config.json``)."""
    return Path(folder).is_dir() and (Path(folder) / CONFIG_FILE).is_file()


def fingerprint(model: ColBERTModel) -> str:
    """A short hash of the config and every weight: indexes record it, so mismatched encoders are refused."""
    h = hashlib.sha256(json.dumps(model.config.fingerprint_settings(), sort_keys=True).encode())
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().to("cpu", torch.float16).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
