"""Checkpoint formats: this package's own folder, colbert-ai folders (ColBERTv2, PLAID) and PyLate
(sentence-transformers) ColBERT folders.

:func:`detect` names a folder's format; :func:`load` and :func:`save` hand it to the format's reader or writer.
Each format's settings map onto :class:`ColBERTConfig` exactly, and a setting that one side cannot represent is
an error naming it, never a silent difference. The layouts and the mapping are described in docs/formats.md:

colbert-ai::

    config.json          the backbone's transformers config with ``architectures: ["HF_ColBERT"]``
    model.safetensors    ``<base_model_prefix>.*`` backbone weights and ``linear.weight [dim, hidden]``
                         (older folders: pytorch_model.bin)
    tokenizer files
    artifact.metadata    colbert-ai's ColBERTConfig as JSON: query_maxlen, doc_maxlen, dim, marker tokens, ...

PyLate::

    modules.json         a sentence-transformers Transformer (at the root) and one Dense module
    config.json, model.safetensors, tokenizer files, sentence_bert_config.json     the Transformer module
    1_Dense/config.json, 1_Dense/model.safetensors     the bias-free projection ``linear.weight [dim, hidden]``
    config_sentence_transformers.json    query_prefix, document_prefix, query_length, document_length, ...
"""
from __future__ import annotations

import json
import re
import string
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

from ..storage import atomic_folder, read_json, write_json
from .config import CONFIG_FILE, ColBERTConfig

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .colbert import ColBERT
    from .network import ColBERTModel
    from .tokenization import ColBERTTokenizer

FORMATS = ("pfc", "colbert-ai", "pylate")

COLBERT_AI_METADATA = "artifact.metadata"
COLBERT_AI_ARCHITECTURE = "HF_ColBERT"
ST_MODULES = "modules.json"
ST_CONFIG = "config_sentence_transformers.json"
ST_TRANSFORMER_CONFIG = "sentence_bert_config.json"
DENSE_DIR = "1_Dense"
IDENTITY = "torch.nn.modules.linear.Identity"

#: colbert-ai's defaults (its ``colbert/infra/config/settings.py``) for keys an ``artifact.metadata`` leaves out
COLBERT_AI_DEFAULTS: Dict[str, Any] = {
    "query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_token": "[Q]", "doc_token": "[D]",
    "query_maxlen": 32, "doc_maxlen": 220, "dim": 128, "mask_punctuation": True, "attend_to_mask_tokens": False,
    "similarity": "cosine", "interaction": "colbert",
}
#: PyLate's defaults (``pylate.models.ColBERT``) for keys a ``config_sentence_transformers.json`` leaves out
PYLATE_DEFAULTS: Dict[str, Any] = {
    "query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": 32, "document_length": 180,
    "attend_to_expansion_tokens": False, "skiplist_words": list(string.punctuation), "do_query_expansion": True,
    "similarity_fn_name": "MaxSim",
}
# a PyLate config is recognised by any of these keys (a plain sentence-transformers model has none of them)
_PYLATE_KEYS = ("query_prefix", "document_prefix", "query_length", "document_length", "attend_to_expansion_tokens",
                "skiplist_words", "do_query_expansion")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")

PathLike = Union[str, Path]


# -- detection and dispatch ----------------------------------------------------------------------------------------
def detect(folder: PathLike) -> Optional[str]:
    """``"pfc"``, ``"colbert-ai"`` or ``"pylate"`` for a checkpoint folder; ``None`` for anything else (a plain
    transformers or sentence-transformers model is a backbone, not a ColBERT checkpoint). A colbert-ai ``.dnn``
    file is named too, so that loading it explains how to convert it."""
    folder = Path(folder)
    if folder.is_file() and folder.suffix == ".dnn":
        return "colbert-ai"
    if not folder.is_dir():
        return None
    if (folder / CONFIG_FILE).exists():
        return "pfc"
    if (folder / ST_MODULES).exists() and _is_pylate(folder):
        return "pylate"
    if (folder / COLBERT_AI_METADATA).exists():
        return "colbert-ai"
    if (folder / "config.json").exists():
        try:
            architectures = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("architectures")
        except (ValueError, UnicodeDecodeError, AttributeError):
            return None
        if architectures and COLBERT_AI_ARCHITECTURE in architectures:
            return "colbert-ai"
    return None


def _is_pylate(folder: Path) -> bool:
    modules = read_json(folder / ST_MODULES, "sentence-transformers module list")
    if any(str(m.get("type", "")).startswith("pylate.") for m in modules if isinstance(m, dict)):
        return True
    if (folder / ST_CONFIG).exists():
        config = read_json(folder / ST_CONFIG, "sentence-transformers config")
        return isinstance(config, dict) and (config.get("model_type") == "ColBERT"
                                             or any(k in config for k in _PYLATE_KEYS))
    return False


def resolve(path: PathLike) -> PathLike:
    """A local folder for a hub id whose repository is a ColBERT checkpoint (downloaded where the network
    allows); anything else is returned as given, for the backbone loader to handle (and report)."""
    if Path(path).exists() or not _HUB_ID.fullmatch(str(path)):
        return path
    try:
        from huggingface_hub import snapshot_download

        probe = snapshot_download(str(path), allow_patterns=[CONFIG_FILE, ST_MODULES, ST_CONFIG, COLBERT_AI_METADATA,
                                                             "config.json"])
        if detect(probe) is None:
            return path
        return snapshot_download(str(path), ignore_patterns=["*.onnx", "onnx/*", "*.h5", "*.msgpack", "*.ot",
                                                             "openvino/*", "*.gguf"])
    except Exception:  # offline, unknown repository: the backbone loader reports the missing model itself
        return path


def load(folder: PathLike, fmt: Optional[str] = None) -> Tuple["ColBERTModel", "ColBERTTokenizer"]:
    """Load a checkpoint folder of any format (offline, fp32)."""
    from . import network

    folder = Path(folder)
    if folder.is_file() and folder.suffix == ".dnn":
        raise ValueError(f"{folder} is a colbert-ai .dnn file, its deprecated format; load it with colbert-ai and "
                         "save it as a folder (Checkpoint(...).save(folder)) first")
    fmt = fmt or detect(folder)
    if fmt == "pfc":
        return network.load(folder)
    if fmt == "colbert-ai":
        return read_colbert_ai(folder)
    if fmt == "pylate":
        return read_pylate(folder)
    raise ValueError(f"{folder} is not a ColBERT checkpoint folder: expected {CONFIG_FILE} (this package), "
                     f"{COLBERT_AI_METADATA} or a {COLBERT_AI_ARCHITECTURE} config.json (colbert-ai), or "
                     f"{ST_MODULES} with a PyLate {ST_CONFIG} (PyLate)")


def save(model: "ColBERTModel", tokenizer: "ColBERTTokenizer", folder: PathLike, fmt: str = "pfc",
         dtype: Optional["torch.dtype"] = None) -> Path:
    """Write ``folder`` in format ``fmt`` (one of :data:`FORMATS`); ``dtype`` casts the stored weights."""
    from . import network

    if fmt == "pfc":
        return network.save(model, tokenizer, folder, dtype=dtype)
    if fmt == "colbert-ai":
        return write_colbert_ai(model, tokenizer, folder, dtype=dtype)
    if fmt == "pylate":
        return write_pylate(model, tokenizer, folder, dtype=dtype)
    raise ValueError(f"format={fmt!r} is not supported; expected one of {FORMATS}")


def with_settings(colbert: "ColBERT", **changes: Any) -> "ColBERT":
    """The same weights under changed settings (scoring, markers, skiplist; not ``dim``), e.g. to export a model
    as the other libraries score it: ``with_settings(colbert, score_query_masks=True, reduction="sum")``.
    Its rankings here change accordingly; the original ``colbert`` is left as it was."""
    import torch

    from .network import ColBERTModel
    from .tokenization import ColBERTTokenizer

    if "dim" in changes and changes["dim"] != colbert.config.dim:
        raise ValueError(f"dim={changes['dim']}: the projection has {colbert.config.dim} rows; with_settings keeps the "
                         "weights, so it cannot change dim")
    config = colbert.config.replace(**changes)
    model = ColBERTModel(colbert.model.backbone, config)
    with torch.no_grad():
        model.projection.weight.copy_(colbert.model.projection.weight)
    amp = str(colbert.amp_dtype).replace("torch.", "") if colbert.amp_dtype is not None else None
    return type(colbert)(model, ColBERTTokenizer(colbert.tokenizer.hf, config), device=str(colbert.device),
                   batch_size=colbert.batch_size, verbose=colbert.verbose, amp_dtype=amp)


# -- shared pieces -------------------------------------------------------------------------------------------------
def _assemble(backbone_dir: Path, weight: "torch.Tensor", config: ColBERTConfig, hf_tok, source: Path):
    """A ColBERTModel over the backbone in ``backbone_dir`` with projection ``weight``, and its tokenizer."""
    import torch

    from .network import ColBERTModel, _load_backbone
    from .tokenization import ColBERTTokenizer

    net = _load_backbone(backbone_dir, local_files_only=True)
    stored = _stored_keys(backbone_dir)
    prefix = net.base_model_prefix
    missing = [k for k in net.state_dict() if stored is not None and k not in stored and f"{prefix}.{k}" not in stored]
    if missing:  # transformers would have initialised them at random, and says so only in a log line
        raise ValueError(f"{source}: the stored weights lack {len(missing)} of the {type(net).__name__} backbone's "
                         f"tensors (e.g. {missing[:3]}), with or without the {prefix!r} prefix")
    if net.get_input_embeddings().num_embeddings < len(hf_tok):
        raise ValueError(f"{source}: the tokenizer has {len(hf_tok)} tokens but the backbone's embeddings only "
                         f"{net.get_input_embeddings().num_embeddings}; the checkpoint is inconsistent")
    model = ColBERTModel(net.float(), config)
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
    import torch

    st, pt = folder / "model.safetensors", folder / "pytorch_model.bin"
    if st.exists():
        from safetensors import safe_open

        with safe_open(str(st), framework="pt", device="cpu") as f:
            return set(f.keys())
    if pt.exists():
        return set(torch.load(str(pt), map_location="cpu", weights_only=True))
    return None


def _read_tensor(folder: Path, name: str, source_desc: str) -> "torch.Tensor":
    """Tensor ``name`` from ``folder``'s model.safetensors (or its pytorch_model.bin)."""
    import torch

    st, pt = folder / "model.safetensors", folder / "pytorch_model.bin"
    if st.exists():
        from safetensors import safe_open

        with safe_open(str(st), framework="pt", device="cpu") as f:
            if name not in f.keys():
                raise ValueError(f"{st} has no tensor {name!r}; {source_desc}")
            return f.get_tensor(name)
    if pt.exists():
        state = torch.load(str(pt), map_location="cpu", weights_only=True)
        if name not in state:
            raise ValueError(f"{pt} has no tensor {name!r}; {source_desc}")
        return state[name]
    raise FileNotFoundError(f"{folder} has neither model.safetensors nor pytorch_model.bin; {source_desc}")


def _tokens_of(hf_tok, ids: Sequence[int]) -> List[str]:
    """The vocabulary entries of ``ids`` (``convert_ids_to_tokens`` would give a lower-cased vocabulary's
    normalised form of an added token such as PyLate's ``[Q] ``, which is not the entry)."""
    entries = {i: t for t, i in hf_tok.get_vocab().items()}
    return [entries[int(i)] for i in ids]


def _marker_tokens(tokenizer: "ColBERTTokenizer") -> Tuple[str, str]:
    return tuple(_tokens_of(tokenizer.hf, [tokenizer.q_marker_id, tokenizer.d_marker_id]))  # type: ignore


def _settled(config: ColBERTConfig, hf_tok, markers: Tuple[str, str], skipped: Sequence[str],
             source: Path) -> ColBERTConfig:
    """``config`` with its markers and skipped tokens, written the way this package's defaults would produce
    them where they do (so a model exported and read back has the settings it started with)."""
    from .tokenization import ColBERTTokenizer

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
    from .network import _copy_as, _quiet_transformers

    if dtype is not None:
        backbone = _copy_as(backbone, dtype)
    with _quiet_transformers():
        backbone.save_pretrained(folder, safe_serialization=True)


# -- colbert-ai ----------------------------------------------------------------------------------------------------
def colbert_ai_punctuation(hf_tok) -> List[str]:
    """The tokens colbert-ai skips in documents when ``mask_punctuation`` is on: for each character of
    ``string.punctuation``, the first token of its encoding."""
    ids = [hf_tok.encode(c, add_special_tokens=False) for c in string.punctuation]
    return list(dict.fromkeys(_tokens_of(hf_tok, [i[0] for i in ids if i])))


def config_from_colbert_ai(metadata: Dict[str, Any], hf_tok, source: PathLike = COLBERT_AI_METADATA
                           ) -> ColBERTConfig:
    """The :class:`ColBERTConfig` of a colbert-ai ``artifact.metadata`` (missing keys take colbert-ai's defaults)."""
    source = Path(source)
    if not isinstance(metadata, dict):
        raise ValueError(f"{source}: expected a JSON object of colbert-ai settings")
    if isinstance(metadata.get("config"), dict):  # colbert-ai accepts settings nested under "config" too
        metadata = metadata["config"]
    m = {k: (metadata[k] if metadata.get(k) is not None else d) for k, d in COLBERT_AI_DEFAULTS.items()}
    problems = []
    if m["interaction"] != "colbert":
        problems.append(f"interaction={m['interaction']!r} (only 'colbert' MaxSim is supported)")
    if m["similarity"] not in ("cosine", "l2"):
        problems.append(f"similarity={m['similarity']!r} (expected 'cosine' or 'l2')")
    if problems:
        raise ValueError(f"{source}: cannot represent colbert-ai settings " + "; ".join(problems))
    try:
        config = ColBERTConfig(
            backbone=str(source.parent), query_maxlen=int(m["query_maxlen"]), doc_maxlen=int(m["doc_maxlen"]),
            dim=int(m["dim"]), similarity=m["similarity"], normalise=True, reduction="sum",
            score_query_masks=True, attend_to_query_masks=bool(m["attend_to_mask_tokens"]),
            query_marker=str(m["query_token"]), doc_marker=str(m["doc_token"]))
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    skipped = colbert_ai_punctuation(hf_tok) if m["mask_punctuation"] else []
    return _settled(config, hf_tok, (m["query_token_id"], m["doc_token_id"]), skipped, source)


def colbert_ai_metadata(config: ColBERTConfig, tokenizer: "ColBERTTokenizer") -> Dict[str, Any]:
    """The ``artifact.metadata`` that makes colbert-ai encode and score as ``config`` does (or an error naming
    each setting it cannot represent)."""
    problems = _export_problems(config, "colbert-ai")
    if not config.score_query_masks:
        problems.append("score_query_masks=False (colbert-ai scores every query position, [MASK]s included)")
    skipped = tokenizer.skipped_ids().tolist()
    vocab = tokenizer.hf.get_vocab()
    punct = sorted(vocab[t] for t in colbert_ai_punctuation(tokenizer.hf))
    if skipped and skipped != punct:
        problems.append(f"skip_punctuation={config.skip_punctuation}, skiplist={list(config.skiplist)} skip "
                        f"{len(skipped)} token(s), but colbert-ai's mask_punctuation skips exactly its {len(punct)} "
                        "punctuation tokens (or none)")
    _refuse(problems, "colbert-ai")
    q, d = _marker_tokens(tokenizer)
    return {
        "query_token_id": q, "doc_token_id": d, "query_token": config.query_marker, "doc_token": config.doc_marker,
        "query_maxlen": config.query_maxlen, "doc_maxlen": config.doc_maxlen, "dim": config.dim,
        "mask_punctuation": bool(skipped), "attend_to_mask_tokens": config.attend_to_query_masks,
        "similarity": "cosine" if config.similarity == "cosine" else "l2", "interaction": "colbert",
        "checkpoint": None, "model_name": None,
        "meta": {"written_by": "pyterrier-fandom-colbert"},
    }


def read_colbert_ai(folder: PathLike):
    """A colbert-ai checkpoint folder (``HF_ColBERT`` weights + ``artifact.metadata``)."""
    folder = Path(folder)
    meta_path = folder / COLBERT_AI_METADATA
    metadata = read_json(meta_path, "colbert-ai settings file") if meta_path.exists() else {}
    hf_tok = _tokenizer(folder)
    config = config_from_colbert_ai(metadata, hf_tok, meta_path)
    weight = _read_tensor(folder, "linear.weight", "a colbert-ai checkpoint stores its projection as linear.weight")
    if weight.shape[0] != config.dim:
        raise ValueError(f"{meta_path} says dim={config.dim} but linear.weight has {weight.shape[0]} rows")
    return _assemble(folder, weight, config, hf_tok, folder)


def write_colbert_ai(model: "ColBERTModel", tokenizer: "ColBERTTokenizer", folder: PathLike, dtype=None) -> Path:
    """Write a folder that colbert-ai's ``Checkpoint(folder)`` loads."""
    import copy

    from safetensors.torch import save_file

    metadata = colbert_ai_metadata(model.config, tokenizer)
    if not metadata["mask_punctuation"]:
        warnings.warn("saving with mask_punctuation=false: colbert-ai 0.2.x only defines its skiplist when "
                      "mask_punctuation is on, so its document encoder needs `checkpoint.skiplist = {}` after "
                      "loading (see docs/formats.md)", stacklevel=3)
    backbone = model.backbone
    prefix = backbone.base_model_prefix
    with _writable(folder) as tmp:
        state = {f"{prefix}.{k}": v for k, v in _state(backbone, dtype).items()}
        state["linear.weight"] = model.projection.weight.detach().to("cpu", dtype or model.projection.weight.dtype
                                                                     ).contiguous().clone()
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        hf_config = copy.deepcopy(backbone.config)
        hf_config.architectures = [COLBERT_AI_ARCHITECTURE]
        hf_config.dtype = dtype or model.projection.weight.dtype
        hf_config.save_pretrained(tmp)
        tokenizer.hf.save_pretrained(tmp)
        write_json(tmp / COLBERT_AI_METADATA, metadata)
    return Path(folder)


# -- PyLate --------------------------------------------------------------------------------------------------------
def config_from_pylate(settings: Dict[str, Any], hf_tok, source: PathLike = ST_CONFIG) -> ColBERTConfig:
    """The :class:`ColBERTConfig` of a PyLate ``config_sentence_transformers.json`` (missing keys take PyLate's
    defaults); ``dim`` comes from the Dense module and is set by :func:`read_pylate`."""
    source = Path(source)
    if not isinstance(settings, dict):
        raise ValueError(f"{source}: expected a JSON object of PyLate settings")
    s = {k: (settings[k] if settings.get(k) is not None else d) for k, d in PYLATE_DEFAULTS.items()}
    problems = []
    if s["similarity_fn_name"] != "MaxSim":
        problems.append(f"similarity_fn_name={s['similarity_fn_name']!r} (expected 'MaxSim')")
    for key in ("query_prefix", "document_prefix"):
        if s[key] == "":
            problems.append(f"{key}='' (this package always inserts a marker token)")
    default_prompt = settings.get("default_prompt_name")
    prompt = (settings.get("prompts") or {}).get(default_prompt) if default_prompt else None
    if prompt:
        problems.append(f"default_prompt_name={default_prompt!r} prepends {prompt!r} to every text")
    if problems:
        raise ValueError(f"{source}: cannot represent PyLate settings " + "; ".join(problems))
    expansion = bool(s["do_query_expansion"])
    try:
        config = ColBERTConfig(
            backbone=str(source.parent), query_maxlen=int(s["query_length"]), doc_maxlen=int(s["document_length"]),
            similarity="cosine", normalise=True, reduction="sum", score_query_masks=expansion,
            attend_to_query_masks=expansion and bool(s["attend_to_expansion_tokens"]))
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    if not isinstance(s["skiplist_words"], list) or not all(isinstance(w, str) for w in s["skiplist_words"]):
        raise ValueError(f"{source}: skiplist_words should be a list of strings")
    # PyLate maps each word with convert_tokens_to_ids: a word outside the vocabulary becomes the unknown token
    skipped = _tokens_of(hf_tok, hf_tok.convert_tokens_to_ids(s["skiplist_words"]))
    return _settled(config, hf_tok, (s["query_prefix"], s["document_prefix"]), skipped, source)


def pylate_settings(config: ColBERTConfig, tokenizer: "ColBERTTokenizer") -> Dict[str, Any]:
    """The PyLate keys of ``config_sentence_transformers.json`` that make PyLate encode and score as ``config``
    does (or an error naming each setting it cannot represent)."""
    problems = _export_problems(config, "PyLate")
    if config.similarity != "cosine":
        problems.append(f"similarity={config.similarity!r} (PyLate's MaxSim is the dot product of unit vectors)")
    if not config.score_query_masks and config.attend_to_query_masks:
        problems.append("score_query_masks=False with attend_to_query_masks=True (PyLate either scores the [MASK] "
                        "expansion vectors, or with do_query_expansion=false neither scores nor attends to them)")
    _refuse(problems, "PyLate")
    q, d = _marker_tokens(tokenizer)
    skipped = _tokens_of(tokenizer.hf, tokenizer.skipped_ids().tolist())
    return {
        "query_prefix": q, "document_prefix": d, "query_length": config.query_maxlen,
        "document_length": config.doc_maxlen, "do_query_expansion": config.score_query_masks,
        "attend_to_expansion_tokens": config.score_query_masks and config.attend_to_query_masks,
        "skiplist_words": skipped, "similarity_fn_name": "MaxSim", "prompts": {}, "default_prompt_name": None,
        "model_type": "ColBERT",
    }


def _module_kind(entry: Dict[str, Any]) -> str:
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def read_pylate(folder: PathLike):
    """A PyLate (sentence-transformers) ColBERT folder."""
    folder = Path(folder)
    modules = read_json(folder / ST_MODULES, "sentence-transformers module list")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ValueError(f"{folder / ST_MODULES}: expected a list of module entries")
    # PyLate keeps the Transformer and Dense modules and drops any other (pooling, normalisation)
    kinds = [(_module_kind(m), m) for m in modules]
    transformers_ = [m for k, m in kinds if k == "Transformer"]
    dense = [m for k, m in kinds if k == "Dense"]
    if len(transformers_) != 1 or kinds[0][0] != "Transformer":
        raise ValueError(f"{folder / ST_MODULES}: expected a Transformer module first, found "
                         f"{[m.get('type') for m in modules]}")
    if len(dense) != 1:
        raise ValueError(f"{folder / ST_MODULES}: this package's ColBERT has one bias-free projection, but the "
                         f"folder has {len(dense)} Dense modules"
                         + (" (PyLate would add an untrained one)" if not dense else ""))
    backbone_dir = folder / transformers_[0].get("path", "")
    dense_dir = folder / dense[0].get("path", DENSE_DIR)
    st_path = backbone_dir / ST_TRANSFORMER_CONFIG
    if st_path.exists() and read_json(st_path, "sentence-transformers Transformer config").get("do_lower_case"):
        raise ValueError(f"{st_path}: do_lower_case=true (the Transformer module lowercases text itself); this "
                         "package tokenises text as the tokenizer does")
    dense_config = read_json(dense_dir / "config.json", "Dense module config")
    problems = []
    if dense_config.get("bias", True):
        problems.append("bias=true (the projection is bias-free)")
    if dense_config.get("activation_function", IDENTITY) != IDENTITY:
        problems.append(f"activation_function={dense_config.get('activation_function')!r} (expected {IDENTITY})")
    if dense_config.get("use_residual", False):
        problems.append("use_residual=true")
    if problems:
        raise ValueError(f"{dense_dir / 'config.json'}: cannot represent the Dense module's " + "; ".join(problems))
    st_config_path = folder / ST_CONFIG
    settings = read_json(st_config_path, "sentence-transformers config") if st_config_path.exists() else {}
    hf_tok = _tokenizer(backbone_dir)
    weight = _read_tensor(dense_dir, "linear.weight", "a Dense module stores its matrix as linear.weight")
    config = config_from_pylate(settings, hf_tok, st_config_path)
    try:
        config = config.replace(dim=int(weight.shape[0]), backbone=str(folder))
    except ValueError as err:
        raise ValueError(f"{dense_dir}: {err}") from None
    if dense_config.get("out_features", weight.shape[0]) != weight.shape[0]:
        raise ValueError(f"{dense_dir / 'config.json'} says out_features={dense_config.get('out_features')} but "
                         f"linear.weight has {weight.shape[0]} rows")
    return _assemble(backbone_dir, weight, config, hf_tok, folder)


def write_pylate(model: "ColBERTModel", tokenizer: "ColBERTTokenizer", folder: PathLike, dtype=None) -> Path:
    """Write a folder that ``pylate.models.ColBERT(folder)`` loads."""
    from safetensors.torch import save_file

    config = model.config
    settings = pylate_settings(config, tokenizer)
    weight = model.projection.weight
    with _writable(folder) as tmp:
        _save_backbone(model.backbone, tmp, dtype)
        tokenizer.hf.save_pretrained(tmp)
        write_json(tmp / ST_TRANSFORMER_CONFIG, {"max_seq_length": config.doc_maxlen - 1, "do_lower_case": False})
        write_json(tmp / ST_MODULES, [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": DENSE_DIR, "type": "pylate.models.Dense.Dense"},
        ])
        (tmp / DENSE_DIR).mkdir()
        write_json(tmp / DENSE_DIR / "config.json", {
            "in_features": int(weight.shape[1]), "out_features": int(weight.shape[0]), "bias": False,
            "activation_function": IDENTITY, "use_residual": False})
        save_file({"linear.weight": weight.detach().to("cpu", dtype or weight.dtype).contiguous()},
                  str(tmp / DENSE_DIR / "model.safetensors"), metadata={"format": "pt"})
        write_json(tmp / ST_CONFIG, settings)
    return Path(folder)
