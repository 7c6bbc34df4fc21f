"""Query and document tokenisation with ColBERT's marker tokens, for BERT and RoBERTa vocabularies.

Query: ``[CLS] [Q] q1 … qm [SEP] [MASK] … [MASK]``, always exactly ``query_maxlen`` tokens (masks attended
unless ``attend_to_query_masks`` is off).
Document: ``[CLS] [D] d1 … dn [SEP]``, length ``min(n + 3, doc_maxlen)``, never padded in what is returned.
The special tokens are the backbone's own (``<s>``, ``</s>``, ``<mask>`` for RoBERTa).
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import numpy as np

from ..checks import int_in_range

if TYPE_CHECKING:  # pragma: no cover
    from tokenizers import Tokenizer
from .config import ColBERTConfig

# BERT vocabularies reserve unused ids; ColBERT uses the first two as its markers.
_BERT_UNUSED_MARKERS = ("[unused0]", "[unused1]")


@dataclass
class TokenizedBatch:
    """Padded token ids of a batch (numpy; the model turns them into tensors).

    ``score_mask`` marks the positions whose vectors take part in the score (padding never does).
    ``offsets`` (documents only, when asked): per text, an array ``[L, 2]`` of character spans in the
    original text, ``(0, 0)`` for special tokens.
    """

    input_ids: np.ndarray        # [B, L] int64
    attention_mask: np.ndarray   # [B, L] int64
    score_mask: np.ndarray       # [B, L] bool
    lengths: np.ndarray          # [B] unpadded lengths
    offsets: Optional[List[np.ndarray]] = None


class ColBERTTokenizer:
    """Wraps a Hugging Face fast tokenizer with ColBERT's query and document layouts."""

    def __init__(self, hf_tokenizer, config: ColBERTConfig):
        self.hf = hf_tokenizer
        self.config = config
        for name in ("cls_token_id", "sep_token_id", "mask_token_id", "pad_token_id"):
            if getattr(hf_tokenizer, name) is None:
                raise ValueError(f"the backbone tokenizer has no {name[:-3]}; ColBERT needs [CLS]/[SEP]/[MASK]/[PAD] "
                                 "(or <s>/</s>/<mask>/<pad>) special tokens")
        self.q_marker_id, self.d_marker_id = self._marker_ids()
        self._skip = self._skipped_flags()
        self._strings: Optional[np.ndarray] = None
        #: copy of the backend tokenizer for offset-free batches, made on first use
        self._rust: Optional["Tokenizer"] = None

    # -- markers -------------------------------------------------------------------------------------------
    def _marker_ids(self):
        vocab = self.hf.get_vocab()
        if self.config.marker_tokens is not None:
            missing = [m for m in self.config.marker_tokens if m not in vocab]
            if missing:
                raise ValueError(f"marker_tokens {missing} are not in the backbone's vocabulary; expected tokens "
                                 "it has (its tokenizer's get_vocab())")
            return tuple(vocab[m] for m in self.config.marker_tokens)
        if all(t in vocab for t in _BERT_UNUSED_MARKERS):
            return tuple(vocab[t] for t in _BERT_UNUSED_MARKERS)
        markers = (self.config.query_marker, self.config.doc_marker)
        missing = [m for m in markers if m not in vocab]
        if missing:
            raise ValueError(f"marker tokens {missing} are not in the vocabulary; call "
                             "ColBERTTokenizer.add_marker_tokens(hf_tokenizer, config) first and resize the "
                             "backbone's embeddings")
        return tuple(vocab[m] for m in markers)

    @staticmethod
    def add_marker_tokens(hf_tokenizer, config: ColBERTConfig) -> int:
        """Make sure the vocabulary has marker ids; returns how many tokens were added (0 for BERT vocabularies)."""
        vocab = hf_tokenizer.get_vocab()
        if all(t in vocab for t in _BERT_UNUSED_MARKERS):
            return 0
        return hf_tokenizer.add_tokens([config.query_marker, config.doc_marker], special_tokens=True)

    def _skipped_flags(self) -> Optional[np.ndarray]:
        """Per vocabulary id, whether its document vectors are skipped (``None`` when nothing is)."""
        if not (self.config.skip_punctuation or self.config.skiplist):
            return None
        vocab = self.hf.get_vocab()
        flags = self._punctuation_ids() if self.config.skip_punctuation else np.zeros(max(vocab.values()) + 1, bool)
        missing = [t for t in self.config.skiplist if t not in vocab]
        if missing:
            raise ValueError(f"skiplist tokens {missing} are not in the backbone's vocabulary; expected exact "
                             "vocabulary entries")
        flags[[vocab[t] for t in self.config.skiplist]] = True
        return flags

    def skipped_ids(self) -> np.ndarray:
        """The sorted vocabulary ids whose document vectors never score."""
        return np.flatnonzero(self._skip) if self._skip is not None else np.zeros(0, dtype=np.int64)

    def _punctuation_ids(self) -> np.ndarray:
        vocab = self.hf.get_vocab()
        flags = np.zeros(max(vocab.values()) + 1, dtype=bool)
        for tok, idx in vocab.items():
            text = self.hf.convert_tokens_to_string([tok]).strip()
            flags[idx] = bool(text) and all(c in string.punctuation for c in text)
        return flags

    # -- layouts -------------------------------------------------------------------------------------------
    def _content_ids(self, texts: Sequence[str], max_content: Optional[int], offsets: bool):
        """Word-piece ids (no specials) of each text, cut to ``max_content`` pieces (``None``: never cut)."""
        if offsets and max_content is not None:
            enc = self.hf(list(texts), add_special_tokens=False, truncation=True, max_length=max_content,
                          return_offsets_mapping=True, return_attention_mask=False, return_token_type_ids=False)
            return enc["input_ids"], enc["offset_mapping"]
        # the Rust tokenizer itself: without offsets ~20% faster than the wrapper; truncating a single sequence is
        # keeping its first pieces; whole texts with offsets this way do not trip the wrapper's warning about
        # sequences longer than the model. A private copy, so no truncation/padding state is shared with self.hf.
        rust = self._rust
        if rust is None:
            from tokenizers import Tokenizer

            rust = self._rust = Tokenizer.from_str(self.hf.backend_tokenizer.to_str())
            rust.no_truncation()
            rust.no_padding()
        if offsets:
            encodings = rust.encode_batch(list(texts), add_special_tokens=False)
            return [e.ids for e in encodings], [e.offsets for e in encodings]
        encodings = rust.encode_batch_fast(list(texts), add_special_tokens=False)
        return [e.ids[:max_content] for e in encodings], None

    def queries(self, texts: Sequence[str]) -> TokenizedBatch:
        """Every query becomes exactly ``query_maxlen`` tokens, padded with [MASK] after [SEP]."""
        n = self.config.query_maxlen
        content, _ = self._content_ids(texts, n - 3, offsets=False)
        ids = np.full((len(texts), n), self.hf.mask_token_id, dtype=np.int64)
        attn = np.ones((len(texts), n), dtype=np.int64)
        score = np.ones((len(texts), n), dtype=bool)
        for i, toks in enumerate(content):
            row = [self.hf.cls_token_id, self.q_marker_id, *toks, self.hf.sep_token_id]
            ids[i, :len(row)] = row
            if not self.config.score_query_masks:
                score[i, len(row):] = False
            if not self.config.attend_to_query_masks:
                attn[i, len(row):] = 0
        return TokenizedBatch(ids, attn, score, np.full(len(texts), n))

    def document_content(self, texts: Sequence[str], offsets: bool = False):
        """Word-piece ids of each text (no specials), truncated to leave room for ``[CLS] [D] … [SEP]``;
        with ``offsets``, also each piece's character span in its text."""
        return self._content_ids(texts, self.config.doc_maxlen - 3, offsets=offsets)

    def document_pieces(self, texts: Sequence[str]) -> List[List[int]]:
        """Word-piece ids of each whole text (no specials, never truncated): what the indexer counts and cuts
        into windows (:func:`windows`)."""
        return self._content_ids(texts, None, offsets=False)[0]

    def whole_document_content(self, texts: Sequence[str], offsets: bool = False):
        """:meth:`document_content` without the cut: word-piece ids of each whole text (no specials), and with
        ``offsets`` each piece's character span in its text."""
        return self._content_ids(texts, None, offsets=offsets)

    def window_rows(self, pieces: Sequence[int], spans: Sequence[Tuple[int, int]]) -> Tuple[np.ndarray, np.ndarray]:
        """The scoring rows of one text's windows ``spans`` (``(start, end)`` piece ranges, :func:`windows`), in the
        order the encoder and the index keep them: ``(positions [R], token ids [R])``, each row's position in the
        text's layout ``[CLS] [D] pieces[:n] [SEP]`` (``n`` = the last window's end), where every window's
        ``[CLS]``, ``[D]`` and ``[SEP]`` map onto the layout's own.

        For pieces ``p0 … p4`` and windows ``(0, 3), (2, 5)`` (no skiplist) the positions are ``0 1 2 3 4 7`` and
        ``0 1 4 5 6 7``: both windows' specials land on positions 0, 1 and 7, piece ``p2`` on position 4 twice.
        """
        packed = self.pack_documents([list(pieces[a:b]) for a, b in spans])
        end = spans[-1][1] if len(spans) else 0
        positions, ids = [], []
        for j, (a, b) in enumerate(spans):
            m = int(packed.lengths[j])
            where = np.concatenate([[0, 1], np.arange(2 + a, 2 + b), [end + 2]])
            keep = packed.score_mask[j, :m]
            positions.append(where[keep])
            ids.append(packed.input_ids[j, :m][keep])
        if not positions:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(positions).astype(np.int64), np.concatenate(ids).astype(np.int64)

    @property
    def max_doc_pieces(self) -> int:
        """Word pieces of a text that fit in one document (``doc_maxlen`` less ``[CLS] [D] … [SEP]``)."""
        return self.config.doc_maxlen - 3

    def pack_documents(self, content: Sequence[Sequence[int]], offsets=None) -> TokenizedBatch:
        """``[CLS] [D] … [SEP]`` rows of length ``min(n + 3, doc_maxlen)``, padded to the batch's longest."""
        lengths = np.array([len(c) + 3 for c in content], dtype=np.int64)
        width = int(lengths.max()) if len(content) else 0
        ids = np.full((len(content), width), self.hf.pad_token_id, dtype=np.int64)
        attn = np.zeros((len(content), width), dtype=np.int64)
        for i, toks in enumerate(content):
            row = [self.hf.cls_token_id, self.d_marker_id, *toks, self.hf.sep_token_id]
            ids[i, :len(row)] = row
            attn[i, :len(row)] = 1
        score = attn.astype(bool)
        if self._skip is not None:
            in_vocab = ids < len(self._skip)
            score &= ~(self._skip[np.where(in_vocab, ids, 0)] & in_vocab)
        out_offsets = None
        if offsets is not None:
            out_offsets = [np.array([(0, 0), (0, 0), *[tuple(o) for o in off], (0, 0)], dtype=np.int64).reshape(-1, 2)
                           for off in offsets]
        return TokenizedBatch(ids, attn, score, lengths, out_offsets)

    def documents(self, texts: Sequence[str], offsets: bool = False) -> TokenizedBatch:
        """Tokenise and pack a batch of documents."""
        content, offs = self.document_content(texts, offsets=offsets)
        return self.pack_documents(content, offs)

    def tokens(self, ids: Sequence[int]) -> List[str]:
        """Token strings for ids, with the markers shown as ``[Q]``/``[D]`` (one array lookup, no loop)."""
        if self._strings is None:
            size = max(len(self.hf), max(self.hf.get_vocab().values()) + 1)
            strings = np.array(self.hf.convert_ids_to_tokens(list(range(size))), dtype=object)
            strings[self.q_marker_id] = self.config.query_marker
            strings[self.d_marker_id] = self.config.doc_marker
            self._strings = strings
        return self._strings[np.asarray(ids, dtype=np.int64)].tolist()



#: how an encoder treats texts longer than one document (``doc_maxlen`` tokens): keep the first pieces, or all
#: of them as overlapping windows
LONG_DOCS = ("truncate", "windows")


def default_stride(window: int) -> int:
    """Word pieces between window starts when the user gives no ``stride``: two thirds of a window, so each
    piece near a window edge is also seen a third of a window inside the next one.

    >>> default_stride(177)
    118
    """
    return max(1, window * 2 // 3)


def check_long_docs(long_docs: str, stride, window: int, doc_maxlen: int) -> Optional[int]:
    """The stride that ``long_docs`` and ``stride`` ask for (None: truncate), or a ``ValueError`` naming the bad one.

    >>> check_long_docs("windows", None, 177, 180), check_long_docs("truncate", None, 177, 180)
    (118, None)
    """
    if long_docs not in LONG_DOCS:
        raise ValueError(f"long_docs={long_docs!r}; expected one of {LONG_DOCS}")
    if stride is not None and long_docs != "windows":
        raise ValueError(f"stride={stride} applies only to long_docs='windows'")
    if long_docs != "windows":
        return None
    stride = default_stride(window) if stride is None else stride
    return int_in_range("stride", stride, 1, window,
                        what=f"word pieces; doc_maxlen={doc_maxlen} leaves {window} per window")


def windows(length: int, size: int, stride: int) -> List[tuple]:
    """``(start, end)`` piece ranges covering ``length`` pieces with windows of at most ``size`` pieces, starting
    every ``stride`` pieces; the last window ends at ``length`` and is moved back to be full (so it may overlap
    its predecessor by more). A text that fits is one window.

    >>> windows(5, 8, 4)
    [(0, 5)]
    >>> windows(20, 8, 6)
    [(0, 8), (6, 14), (12, 20)]
    >>> windows(17, 8, 6)
    [(0, 8), (6, 14), (9, 17)]
    """
    if size < 1 or not 1 <= stride <= size:
        raise ValueError(f"windows of size={size} with stride={stride}; expected 1 <= stride <= size")
    if length <= size:
        return [(0, length)]
    starts = [*range(0, length - size, stride), length - size]
    return [(s, s + size) for s in starts]
