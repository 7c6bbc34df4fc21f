"""A backbone's fast tokenizer for inference read with the ``tokenizers`` package alone, without transformers.

Importing transformers to build ``AutoTokenizer`` costs about 1.4 s of CPU, most of a cold ``pfc search``'s
encoder loading, although what inference asks of the tokenizer is done by the Rust ``tokenizers.Tokenizer``
behind it. :class:`LightTokenizer` is that Rust tokenizer read from the folder's ``tokenizer.json``, with the
special tokens of ``tokenizer_config.json`` / ``special_tokens_map.json``, exposing exactly what
:class:`~.tokenization.ColBERTTokenizer` and the reader ask of a transformers tokenizer (the ids of the special
tokens, ``get_vocab``, ``len``, ``vocab_size``, ``convert_ids_to_tokens``, ``convert_tokens_to_string``,
``backend_tokenizer``, ``all_special_tokens``, ``name_or_path`` and batch calls without special tokens, with
truncation and offsets); anything else is an ``AttributeError`` naming it.

The rule (:func:`light_tokenizer_refusal`): the light tokenizer is used only where it is provably the one
transformers builds, that is when

- the folder has ``tokenizer.json`` and ``tokenizer_config.json``, whose ``tokenizer_class`` is BERT's or RoBERTa's;
- every key of ``tokenizer_config.json`` is one listed here, at a value this module reproduces;
- the pipeline in ``tokenizer.json`` (normaliser, pre-tokeniser, model options, decoder, post-processor) equals
  the one transformers' class builds from those options (transformers rebuilds it from the config's options
  rather than reading it from the file), and its added tokens are the config's;

and otherwise (a slow-tokenizer-only folder, another class, an option not implemented here, a pipeline that
differs) :func:`load_light_tokenizer` returns None and the caller loads ``AutoTokenizer`` as before: never
different ids. Training and saving keep transformers' tokenizer.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:  # pragma: no cover
    from tokenizers import Tokenizer

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"

#: the special tokens transformers' classes name, in its order, with each class's defaults
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_DEFAULTS: Dict[str, Dict[str, Optional[str]]] = {
    "bert": {"bos_token": None, "eos_token": None, "unk_token": "[UNK]", "sep_token": "[SEP]",
             "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"},
    "roberta": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
                "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"},
}
_CLASSES = {"BertTokenizer": "bert", "BertTokenizerFast": "bert",
            "RobertaTokenizer": "roberta", "RobertaTokenizerFast": "roberta"}
#: options that only matter to what inference never does here (decoding text, padding, the model's length
#: warning, where the files came from): any value
_NEUTRAL = {"model_max_length", "max_length", "padding_side", "pad_to_multiple_of", "pad_token_type_id",
            "clean_up_tokenization_spaces", "errors", "is_local", "local_files_only", "name_or_path",
            "model_input_names", "tokenizer_class", "added_tokens_decoder", "vocab_file", "merges_file",
            "tokenizer_file"}
#: options with the only value reproduced here (the others change how text is split or truncated)
_FIXED: Dict[str, Tuple[Any, ...]] = {
    "backend": ("tokenizers",), "stride": (0,), "truncation_side": ("right",),
    "truncation_strategy": ("longest_first",), "split_special_tokens": (False,), "do_basic_tokenize": (True,),
    "never_split": (None, []), "extra_special_tokens": ({}, [], None), "additional_special_tokens": ([], None),
}
#: options of each class's recipe (:func:`_recipe`), with transformers' defaults
_RECIPE_OPTIONS: Dict[str, Dict[str, Any]] = {
    "bert": {"do_lower_case": True, "tokenize_chinese_chars": True, "strip_accents": None},
    "roberta": {"add_prefix_space": False, "trim_offsets": True}}
#: transformers patches the pre-tokeniser of vocabularies this large (Mistral's regex): not reproduced
_MAX_VOCAB = 100_000


class LightTokenizer:
    """A ``tokenizers.Tokenizer`` behind the part of transformers' fast-tokenizer interface inference uses."""

    def __init__(self, backend: "Tokenizer", specials: Dict[str, Optional[str]], name_or_path: str):
        backend.no_truncation()
        backend.no_padding()
        self.backend_tokenizer = backend
        self.name_or_path = name_or_path
        self._specials = specials
        for key in _SPECIAL_KEYS:
            token = specials.get(key)
            setattr(self, key, token)
            setattr(self, f"{key}_id", backend.token_to_id(token) if token is not None else None)

    # the attributes set per special token, for the type checker
    cls_token_id: Optional[int]
    sep_token_id: Optional[int]
    mask_token_id: Optional[int]
    pad_token_id: Optional[int]
    unk_token_id: Optional[int]
    bos_token_id: Optional[int]
    eos_token_id: Optional[int]

    @property
    def all_special_tokens(self) -> List[str]:
        return list(dict.fromkeys(t for k in _SPECIAL_KEYS if (t := self._specials.get(k)) is not None))

    @property
    def vocab_size(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> Dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def convert_ids_to_tokens(self, ids: Union[int, Sequence[int]]) -> Any:
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids]

    def convert_tokens_to_string(self, tokens: List[str]) -> str:
        decoder = self.backend_tokenizer.decoder
        return decoder.decode(tokens) if decoder is not None else " ".join(tokens)

    def __call__(self, texts: Sequence[str], *, add_special_tokens: bool = True, truncation: bool = False,
                 max_length: Optional[int] = None, return_offsets_mapping: bool = False,
                 return_attention_mask: Optional[bool] = None, return_token_type_ids: Optional[bool] = None
                 ) -> Dict[str, list]:
        """``{"input_ids": [...], ("offset_mapping": [...])}`` of a batch of texts, as transformers' call gives
        them: only without special tokens, and truncation only to an explicit ``max_length``."""
        if add_special_tokens:
            raise ValueError("LightTokenizer encodes without special tokens only (add_special_tokens=False); the "
                             "layouts add their own")
        if truncation and max_length is None:
            raise ValueError("LightTokenizer truncates only to an explicit max_length")
        if isinstance(texts, str):
            raise TypeError("LightTokenizer encodes a batch (a list of texts), not one text")
        encodings = self.backend_tokenizer.encode_batch(list(texts), add_special_tokens=False)
        keep = max_length if truncation else None  # one sequence, cut on the right: its first pieces
        out: Dict[str, list] = {"input_ids": [e.ids[:keep] for e in encodings]}
        if return_offsets_mapping:
            out["offset_mapping"] = [e.offsets[:keep] for e in encodings]
        return out

    def __repr__(self) -> str:
        return f"LightTokenizer({self.name_or_path!r}, vocab={len(self)})"


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _content(token: Any) -> Optional[str]:
    """A special token's text, from a string or an ``AddedToken`` dict."""
    return token.get("content") if isinstance(token, dict) else token


def _recipe(kind: str, options: Dict[str, Any], specials: Dict[str, Optional[str]], ids: Dict[str, Optional[int]]
            ) -> Dict[str, Any]:
    """The pipeline transformers' class builds from ``options`` (empty vocabulary), as ``tokenizer.json`` parts."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE, WordPiece

    cls, sep = str(specials["cls_token"]), str(specials["sep_token"])
    cls_id, sep_id = ids["cls_token"], ids["sep_token"]
    if cls_id is None or sep_id is None:
        raise ValueError(f"no id for {cls!r} or {sep!r}")
    if kind == "bert":
        tok = Tokenizer(WordPiece({}, unk_token=str(specials["unk_token"])))
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=options["tokenize_chinese_chars"],
            strip_accents=options["strip_accents"], lowercase=options["do_lower_case"])
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, cls_id), (sep, sep_id)])
    else:
        tok = Tokenizer(BPE(vocab={}, merges=[], dropout=None, continuing_subword_prefix="", end_of_word_suffix="",
                            fuse_unk=False))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=options["add_prefix_space"])
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.RobertaProcessing((sep, sep_id), (cls, cls_id),
                                                          options["trim_offsets"], options["add_prefix_space"])
    return json.loads(tok.to_str())


_COMPARED = ("normalizer", "pre_tokenizer", "post_processor", "decoder")
_ADDED_FIELDS = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")


def _read(folder: Path) -> Tuple[Optional[str], Any, Any, Any]:
    """(why not, or None; ``tokenizer_config.json``, ``tokenizer.json``, ``special_tokens_map.json`` or {})."""
    if not (folder / TOKENIZER_JSON).is_file():
        return f"{folder} has no {TOKENIZER_JSON} (a slow-tokenizer-only backbone)", None, None, None
    if not (folder / TOKENIZER_CONFIG).is_file():
        return f"{folder} has no {TOKENIZER_CONFIG}", None, None, None
    try:
        config = _read_json(folder / TOKENIZER_CONFIG)
        file = _read_json(folder / TOKENIZER_JSON)
        mapping = _read_json(folder / SPECIAL_TOKENS_MAP) if (folder / SPECIAL_TOKENS_MAP).is_file() else {}
    except (OSError, ValueError) as err:  # unreadable: transformers' loader says what is wrong
        return f"{folder}: {type(err).__name__}: {err}", None, None, None
    if not isinstance(config, dict) or not isinstance(file, dict) or not isinstance(mapping, dict):
        return f"{folder}: expected JSON objects", None, None, None
    return None, config, file, mapping


def _options(folder: Path, kind: str, config: Dict[str, Any]) -> Tuple[Optional[str], Dict[str, Any]]:
    """(why not, or None; the options of the class's recipe) from ``tokenizer_config.json``."""
    options = dict(_RECIPE_OPTIONS[kind])
    for key, value in config.items():
        if key in _NEUTRAL or key in _SPECIAL_KEYS:
            continue
        if key in options:
            options[key] = value
        elif key not in _FIXED:
            return f"{folder / TOKENIZER_CONFIG}: option {key!r} is not implemented by the light tokenizer", options
        elif value not in _FIXED[key]:
            return f"{folder / TOKENIZER_CONFIG}: {key}={value!r}; the light tokenizer implements {_FIXED[key]}", \
                options
    return None, options


def _specials(folder: Path, kind: str, config: Dict[str, Any], file: Dict[str, Any], mapping: Dict[str, Any]
              ) -> Tuple[Optional[str], Dict[str, Optional[str]]]:
    """(why not, or None; the special tokens), which must be special added tokens of ``tokenizer.json``, the
    ones ``tokenizer_config.json`` declares (transformers would add any missing one, changing the ids)."""
    specials: Dict[str, Optional[str]] = {}
    unknown = set(mapping) - set(_SPECIAL_KEYS)
    if unknown:
        return f"{folder / SPECIAL_TOKENS_MAP}: {sorted(unknown)} are not implemented by the light tokenizer", specials
    for key in _SPECIAL_KEYS:
        given = [_content(src[key]) for src in (config, mapping) if key in src]
        if len(set(given)) > 1:
            return f"{folder}: {key} is {given[0]!r} in {TOKENIZER_CONFIG} but {given[1]!r} in " \
                   f"{SPECIAL_TOKENS_MAP}", specials
        specials[key] = given[0] if given else _DEFAULTS[kind][key]
    added = {int(t["id"]): {f: t.get(f) for f in _ADDED_FIELDS} for t in file.get("added_tokens") or []}
    if "added_tokens_decoder" in config:
        declared = {int(i): {f: t.get(f) for f in _ADDED_FIELDS}
                    for i, t in (config["added_tokens_decoder"] or {}).items()}
        if declared != added:
            return f"{folder}: the added tokens of {TOKENIZER_CONFIG} and {TOKENIZER_JSON} differ", specials
    added_special = {t["content"] for t in added.values() if t["special"]}
    missing = [t for t in specials.values() if t is not None and t not in added_special]
    if missing:
        return f"{folder / TOKENIZER_JSON}: special tokens {missing} are not among its added tokens", specials
    return None, specials


def _pipeline(folder: Path, kind: str, options: Dict[str, Any], specials: Dict[str, Optional[str]],
              file: Dict[str, Any]) -> Optional[str]:
    """Why ``tokenizer.json``'s pipeline is not the one transformers' class builds from ``options``, or None."""
    vocab = (file.get("model") or {}).get("vocab")
    if not isinstance(vocab, dict) or len(vocab) > _MAX_VOCAB:
        return f"{folder / TOKENIZER_JSON}: expected a vocabulary of at most {_MAX_VOCAB} entries"
    ids = {k: (vocab.get(t) if t is not None else None) for k, t in specials.items()}
    for token in file.get("added_tokens") or []:
        ids.update({k: int(token["id"]) for k, s in specials.items() if s == token["content"]})
    try:
        want = _recipe(kind, options, specials, ids)
    except (TypeError, ValueError) as err:  # an option's value the recipe cannot take
        return f"{folder / TOKENIZER_CONFIG}: {type(err).__name__}: {err}"
    for part in _COMPARED:
        if file.get(part) != want.get(part):
            return f"{folder / TOKENIZER_JSON}: its {part} is not the one the {kind} tokenizer builds from " \
                   f"{TOKENIZER_CONFIG}"
    model = {k: v for k, v in (file.get("model") or {}).items() if k not in ("vocab", "merges")}
    if model != {k: v for k, v in want["model"].items() if k not in ("vocab", "merges")}:
        return f"{folder / TOKENIZER_JSON}: its model options are not the ones the {kind} tokenizer uses"
    return None


def _refusal(folder: Path) -> Tuple[Optional[str], Optional[Dict[str, Optional[str]]]]:
    """(why the light tokenizer cannot stand in for transformers' here, or None; the special tokens if it can)."""
    why, config, file, mapping = _read(folder)
    if why is not None:
        return why, None
    kind = _CLASSES.get(str(config.get("tokenizer_class")))
    if kind is None:
        return f"{folder / TOKENIZER_CONFIG}: tokenizer_class {config.get('tokenizer_class')!r} is not one of " \
               f"{sorted(_CLASSES)}", None
    why, options = _options(folder, kind, config)
    if why is not None:
        return why, None
    why, specials = _specials(folder, kind, config, file, mapping)
    if why is not None:
        return why, None
    why = _pipeline(folder, kind, options, specials, file)
    return (why, None) if why is not None else (None, specials)


def light_tokenizer_refusal(folder: Union[str, Path]) -> Optional[str]:
    """Why ``folder``'s tokenizer must be loaded with transformers (module notes), or None where the light one
    gives the same ids, offsets and tokens."""
    return _refusal(Path(folder))[0]


def load_light_tokenizer(folder: Union[str, Path]) -> Optional[LightTokenizer]:
    """The folder's tokenizer read with ``tokenizers`` alone, or None where :func:`light_tokenizer_refusal` says
    it cannot stand in for transformers' (the caller then loads ``AutoTokenizer``)."""
    from tokenizers import Tokenizer

    folder = Path(folder)
    why, specials = _refusal(folder)
    if why is not None or specials is None:
        return None
    return LightTokenizer(Tokenizer.from_file(str(folder / TOKENIZER_JSON)), specials, str(folder))


def load_tokenizer(folder: Union[str, Path], light: bool = False) -> Any:
    """The folder's fast tokenizer: with ``light`` (inference), :func:`load_light_tokenizer`'s where it stands in
    for transformers', else (and without ``light``) ``AutoTokenizer``'s. The one rule the ColBERT encoder and the
    reader load their tokenizers by."""
    tokenizer = load_light_tokenizer(folder) if light else None
    if tokenizer is not None:
        return tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, use_fast=True, local_files_only=True)
