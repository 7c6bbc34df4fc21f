"""What every checkpoint format shares: the registry (one :class:`CheckpointFormat` per module, as the ANN kinds
of the index are registered), detection, and the pieces that read and write backbones, projections, tokenizers
and marker settings."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ...storage import atomic_folder
from ..config import ColBERTConfig

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..network import ColBERTModel
    from ..tokenization import ColBERTTokenizer

PathLike = Union[str, Path]
_REMEDY = "the checkpoint's weights are damaged (or diverged in training): download or export it again"


@dataclass(frozen=True)
class CheckpointFormat:
    """One checkpoint format: how to recognise, read and write its folders."""
    #: the name users pass as ``format=``
    name: str
    #: whether a path (folder, or a file for formats that had single-file checkpoints) is of this format
    claims: Callable[[Path], bool]
    #: ``folder -> (ColBERTModel, ColBERTTokenizer)``, offline, fp32
    read: Callable[[Path], Tuple["ColBERTModel", "ColBERTTokenizer"]]
    #: ``(model, tokenizer, folder, dtype=None) -> folder``
    write: Callable[..., Path]
    #: the files that tell a folder of this format apart (fetched first from a hub repository)
    marker_files: Tuple[str, ...]
    #: what a folder of this format holds, for the error about a folder of no format
    expects: str
    #: the order formats are listed in (:data:`~pyterrier_fandom_colbert.model.formats.FORMATS`, errors)
    rank: int
    #: detection order, lowest first: a folder that several formats claim is the first one's
    detect_rank: int


#: the registered formats by name, kept in the order of their ``rank``
CHECKPOINT_FORMATS: Dict[str, CheckpointFormat] = {}


def register_format(fmt: CheckpointFormat) -> CheckpointFormat:
    """Add ``fmt`` to :data:`CHECKPOINT_FORMATS` (a name registered twice is a programming error)."""
    if fmt.name in CHECKPOINT_FORMATS:
        raise ValueError(f"checkpoint format {fmt.name!r} is registered twice")
    ordered = sorted([*CHECKPOINT_FORMATS.values(), fmt], key=lambda f: f.rank)
    CHECKPOINT_FORMATS.clear()
    CHECKPOINT_FORMATS.update((f.name, f) for f in ordered)
    return fmt


def get_format(name: str) -> CheckpointFormat:
    """The registered format called ``name``, or an error listing the known ones."""
    if name not in CHECKPOINT_FORMATS:
        raise ValueError(f"format={name!r} is not supported; expected one of {tuple(CHECKPOINT_FORMATS)}")
    return CHECKPOINT_FORMATS[name]


def detect(folder: PathLike) -> Optional[str]:
    """``"pfc"``, ``"colbert-ai"`` or ``"pylate"`` for a checkpoint folder; ``None`` for anything else (a plain
    transformers or sentence-transformers model is a backbone, not a ColBERT checkpoint). A colbert-ai ``.dnn``
    file is named too, so that loading it explains how to convert it."""
    path = Path(folder)
    for fmt in sorted(CHECKPOINT_FORMATS.values(), key=lambda f: f.detect_rank):
        if fmt.claims(path):
            return fmt.name
    return None


# -- shared pieces -------------------------------------------------------------------------------------------------
def _assemble(backbone_dir: Path, weight: "torch.Tensor", config: ColBERTConfig, hf_tok, source: Path):
    """A ColBERTModel over the backbone in ``backbone_dir`` with projection ``weight``, and its tokenizer."""
    import torch

    from ..network import ColBERTModel, _load_backbone, embedding_rows, refuse_non_finite
    from ..tokenization import ColBERTTokenizer

    net = _load_backbone(backbone_dir, local_files_only=True)
    weights_file = _weights_path(backbone_dir)
    refuse_non_finite(net.state_dict().items(), f"the backbone ({weights_file})", _REMEDY, weights_file)
    stored = _stored_keys(backbone_dir)
    prefix = net.base_model_prefix
    missing = [k for k in net.state_dict() if stored is not None and k not in stored and f"{prefix}.{k}" not in stored]
    if missing:  # transformers would have initialised them at random, and says so only in a log line
        raise ValueError(f"{source}: the stored weights lack {len(missing)} of the {type(net).__name__} backbone's "
                         f"tensors (e.g. {missing[:3]}), with or without the {prefix!r} prefix")
    if embedding_rows(net) < len(hf_tok):
        raise ValueError(f"{source}: the tokenizer has {len(hf_tok)} tokens but the backbone's embeddings only "
                         f"{embedding_rows(net)}; the checkpoint is inconsistent")
    try:
        model = ColBERTModel(net.float(), config)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    want = tuple(model.projection.weight.shape)
    if tuple(weight.shape) != want:
        raise ValueError(f"{source}: the projection holds {list(weight.shape)} but a {want[1]}-wide backbone with "
                         f"dim={config.dim} needs {list(want)}")
    with torch.no_grad():
        model.projection.weight.copy_(weight.float())
    return model, ColBERTTokenizer(hf_tok, config)


def _tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, use_fast=True, local_files_only=True)


def _stored_keys(folder: Path) -> Optional[set]:
    """The tensor names in ``folder``'s single weights file (``None`` for sharded or other layouts)."""

    st, pt = folder / "model.safetensors", folder / "pytorch_model.bin"
    if st.exists():
        from safetensors import safe_open

        with safe_open(str(st), framework="pt", device="cpu") as f:
            return set(f.keys())
    if pt.exists():
        return set(load_torch_weights(pt))
    return None


def load_torch_weights(path: Path) -> Dict[str, "torch.Tensor"]:
    """The tensors of a torch ``.bin``/``.pt`` weights file, unpickled with ``weights_only=True``: a pickle that
    holds more than tensors (loading it could run code) or that does not read is refused in one line
    (:class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming the file), never with torch's traceback."""
    import pickle

    import torch

    from ...storage import DamagedFileError

    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[-1].strip()
        raise DamagedFileError(path, f"{path} is refused: it is a pickle that does not hold tensors alone ({first}), "
                                     "and loading it could run code; convert it to safetensors where you trust it, "
                                     "or download the checkpoint again") from None
    except (RuntimeError, EOFError, OSError, ValueError, AttributeError, ImportError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0].strip()
        raise DamagedFileError(path, f"{path} is not a readable torch weights file ({type(err).__name__}: {first}); "
                                     f"{_REMEDY}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise DamagedFileError(path, f"{path} holds a {type(state).__name__}, not a dict of named tensors; {_REMEDY}")
    return state


def _weights_path(folder: Path) -> Path:
    """``folder``'s weights file (model.safetensors, else pytorch_model.bin), to read or to name in errors."""
    st = folder / "model.safetensors"
    return st if st.exists() or not (folder / "pytorch_model.bin").exists() else folder / "pytorch_model.bin"


def _read_tensor(folder: Path, name: str, source_desc: str) -> "torch.Tensor":
    """Tensor ``name`` from ``folder``'s model.safetensors (or its pytorch_model.bin); NaN or inf values are
    refused, naming the file."""

    from ..network import refuse_non_finite

    path = _weights_path(folder)
    if not path.exists():
        raise FileNotFoundError(f"{folder} has neither model.safetensors nor pytorch_model.bin; {source_desc}")
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt", device="cpu") as f:
            if name not in f.keys():  # noqa: SIM118 (a safetensors file handle has keys() but no __contains__)
                raise ValueError(f"{path} has no tensor {name!r}; {source_desc}")
            tensor = f.get_tensor(name)
    else:
        state = load_torch_weights(path)
        if name not in state:
            raise ValueError(f"{path} has no tensor {name!r}; {source_desc}")
        tensor = state[name]
    refuse_non_finite([(name, tensor)], str(path), _REMEDY, path)
    return tensor


def _tokens_of(hf_tok, ids: Sequence[int]) -> List[str]:
    """The vocabulary entries of ``ids`` (``convert_ids_to_tokens`` would give a lower-cased vocabulary's
    normalised form of an added token such as PyLate's ``[Q] ``, which is not the entry)."""
    entries = {i: t for t, i in hf_tok.get_vocab().items()}
    return [entries[int(i)] for i in ids]


def _marker_tokens(tokenizer: "ColBERTTokenizer") -> Tuple[str, str]:
    query, document = _tokens_of(tokenizer.hf, [tokenizer.q_marker_id, tokenizer.d_marker_id])
    return query, document


def _settled(config: ColBERTConfig, hf_tok, markers: Tuple[str, str], skipped: Sequence[str],
             source: Path) -> ColBERTConfig:
    """``config`` with its markers and skipped tokens, written the way this package's defaults would produce
    them where they do (so a model exported and read back has the settings it started with)."""
    from ..tokenization import ColBERTTokenizer

    vocab = hf_tok.get_vocab()
    missing = [m for m in markers if m not in vocab]
    if missing:
        raise ValueError(f"{source}: the marker tokens {missing} are not in the tokenizer's vocabulary (the other "
                         "library would add them with untrained embeddings); this package cannot represent that")
    config = config.replace(marker_tokens=markers)
    plain = ColBERTTokenizer(hf_tok, config.replace(marker_tokens=None)) if _default_markers_exist(hf_tok, config) \
        else None
    if plain is not None and (plain.q_marker_id, plain.d_marker_id) == tuple(vocab[m] for m in markers):
        config = config.replace(marker_tokens=None)
    skip_ids = sorted({vocab[t] for t in skipped})
    if not skip_ids:
        return config.replace(skiplist=(), skip_punctuation=False)
    punct = ColBERTTokenizer(hf_tok, config.replace(skip_punctuation=True, skiplist=())).skipped_ids().tolist()
    if punct == skip_ids:
        return config.replace(skiplist=(), skip_punctuation=True)
    ordered = list(dict.fromkeys(skipped))
    return config.replace(skiplist=tuple(ordered), skip_punctuation=False)


def _default_markers_exist(hf_tok, config: ColBERTConfig) -> bool:
    vocab = hf_tok.get_vocab()
    return (all(t in vocab for t in ("[unused0]", "[unused1]"))
            or all(t in vocab for t in (config.query_marker, config.doc_marker)))


def _export_problems(config: ColBERTConfig, library: str) -> List[str]:
    problems = []
    if not config.normalise:
        problems.append(f"normalise=False ({library} always L2-normalises the vectors)")
    if config.reduction != "sum":
        problems.append(f"reduction={config.reduction!r} ({library} sums the query tokens' maximum similarities)")
    return problems


def _refuse(problems: List[str], fmt: str) -> None:
    if problems:
        raise ValueError(f"cannot save in the {fmt} format without changing how the model scores: "
                         + "; ".join(problems) + ". To export the same weights under settings the format can "
                         "represent, save pyterrier_fandom_colbert.model.formats.with_settings(colbert, ...) "
                         "instead (its scores differ from this model's)")


def _writable(folder: PathLike):
    """A temporary folder that becomes ``folder``; an existing checkpoint folder (or empty folder) is replaced."""
    target = Path(folder)
    return atomic_folder(target, overwrite=True, what="ColBERT checkpoint folder",
                         replaceable=lambda p: p.is_dir() and (detect(p) is not None or not any(p.iterdir())))


def _state(module, dtype) -> Dict[str, "torch.Tensor"]:
    return {k: v.detach().to("cpu", dtype or v.dtype).contiguous().clone() for k, v in module.state_dict().items()}


def _save_backbone(backbone, folder: Path, dtype) -> None:
    from ..network import _copy_as, _quiet_transformers

    if dtype is not None:
        backbone = _copy_as(backbone, dtype)
    with _quiet_transformers():
        backbone.save_pretrained(folder, safe_serialization=True)
