"""Binary tree of aggregated term weights: descend to a few documents instead of scoring them all.

The documents are split recursively into two halves down to ``min_leaf`` documents per node. Each node stores,
for every term, the maximum weight (``aggregate="max"``; ``"mean"`` for comparison) over the documents below
it. With non-negative weights the max aggregate's dot product with a query is an upper bound of the score of
every document below the node. A query descends from the root into the child whose aggregate has the higher dot
product with it, down to ``depth`` or until a subtree holds at most ``leaf_size`` documents, whose documents are
then scored exactly. ``beam`` > 1 keeps that many nodes at each step (the best by bound, finished nodes
included), since one wrong turn near the root loses the answer.

Splits: ``"unsorted"`` halves the documents in index order (the seed's method); ``"cluster"`` first orders a
node's documents by a balanced spherical 2-means on their normalised weight vectors, so each half groups
similar documents (the planned pre-grouping). Halves are equal (±1), so each node is a contiguous range of the
tree's document order and the exact scoring of reached nodes reads only their postings.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import scipy.sparse as sp

from ..checks import int_in_range, positive_int
from ..progress import progress
from ..storage import JsonConfig, atomic_folder, read_json, write_json
from .index import Postings, SparseIndex, SparseSearcher

# -- maths (pure functions) -----------------------------------------------------------------------------------

def balanced_bisect(x: sp.csr_matrix, iterations: int = 5, seed: int = 0) -> np.ndarray:
    """An order of the rows of ``x`` (unit rows) whose first ``n // 2`` form one cluster of a balanced 2-means.

    >>> x = sp.csr_matrix(np.array([[1.0, 0], [0, 1.0], [0.9, 0.1], [0.1, 0.9]]))
    >>> order = balanced_bisect(x)
    >>> sorted(order[:2].tolist()) in ([0, 2], [1, 3])
    True
    """
    n = x.shape[0]
    rng = np.random.default_rng(seed)
    first = x[int(rng.integers(n))].toarray().ravel()
    far = int(np.argmin(np.asarray(x @ first).ravel()))
    ca, cb = first, x[far].toarray().ravel()
    order = np.arange(n)
    for _ in range(max(iterations, 1)):
        diff = np.asarray(x @ (ca - cb)).ravel()  # (similarity to a) − (similarity to b)
        order = np.argsort(-diff, kind="stable")
        ca = np.asarray(x[order[:n // 2]].mean(axis=0)).ravel()
        cb = np.asarray(x[order[n // 2:]].mean(axis=0)).ravel()
    return order


def normalise_rows(m: sp.csr_matrix) -> sp.csr_matrix:
    norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)) @ m)


@dataclass(frozen=True)
class TreeConfig(JsonConfig):
    """How the tree is built.

    >>> TreeConfig(split="sorted")
    Traceback (most recent call last):
    ...
    ValueError: split='sorted'; expected 'unsorted' or 'cluster'
    """

    split: str = "unsorted"
    aggregate: str = "max"
    #: nodes with at most this many documents are not split
    min_leaf: int = 8
    #: 2-means iterations per split ("cluster")
    iterations: int = 5
    seed: int = 0

    def __post_init__(self):
        if self.split not in ("unsorted", "cluster"):
            raise ValueError(f"split={self.split!r}; expected 'unsorted' or 'cluster'")
        if self.aggregate not in ("max", "mean"):
            raise ValueError(f"aggregate={self.aggregate!r}; expected 'max' or 'mean'")
        positive_int("min_leaf", self.min_leaf)
        positive_int("iterations", self.iterations)


class BinaryTree:
    """The tree over a :class:`SparseIndex`: document order, node ranges and aggregated weights."""

    def __init__(self, index: SparseIndex, config: TreeConfig, order: np.ndarray, nodes: np.ndarray,
                 aggregates: sp.csr_matrix):
        if len(order) != index.num_docs or aggregates.shape != (len(nodes), len(index.lexicon)):
            raise ValueError(f"tree of {len(order)} documents and {aggregates.shape} aggregates does not match "
                             f"{index!r} ({index.num_docs} documents, {len(index.lexicon)} terms)")
        self.index, self.config, self.order = index, config, np.asarray(order, dtype=np.int64)
        #: per node: lo, hi (range of tree positions), left, right (child ids, -1 at leaves), depth
        self.nodes = np.asarray(nodes, dtype=np.int64)
        self.lo, self.hi, self.left, self.right, self.depth = self.nodes.T
        self.size = self.hi - self.lo
        self.aggregates = aggregates.tocsr()
        self.aggregates.sort_indices()
        terms = self.aggregates.shape[1]
        rows = np.repeat(np.arange(len(nodes), dtype=np.int64), np.diff(self.aggregates.indptr))
        self._keys = rows * terms + self.aggregates.indices

    @classmethod
    def build(cls, index: SparseIndex, config: Optional[TreeConfig] = None, verbose: bool = False) -> "BinaryTree":
        config = config or TreeConfig()
        docs = index.docs
        order = np.arange(index.num_docs, dtype=np.int64)
        unit = normalise_rows(docs) if config.split == "cluster" else None
        nodes: List[List[int]] = [[0, index.num_docs, -1, -1, 0]]
        bar = progress(desc=f"tree ({config.split})", unit="node", enabled=verbose)
        i = 0
        while i < len(nodes):
            lo, hi, _, _, d = nodes[i]
            if hi - lo > config.min_leaf:
                if unit is not None:
                    part = order[lo:hi]
                    order[lo:hi] = part[balanced_bisect(unit[part], config.iterations, config.seed + i)]
                mid = (lo + hi) // 2
                nodes[i][2], nodes[i][3] = len(nodes), len(nodes) + 1
                nodes.append([lo, mid, -1, -1, d + 1])
                nodes.append([mid, hi, -1, -1, d + 1])
            i += 1
            bar.update()
        bar.close()
        ordered = docs[order]
        sums: List[Any] = [None] * len(nodes)
        for i in range(len(nodes) - 1, -1, -1):  # children come after their parent
            lo, hi, left, right, _ = nodes[i]
            if left < 0:
                block = ordered[lo:hi]
                sums[i] = sp.csr_matrix(block.max(axis=0) if config.aggregate == "max" else block.sum(axis=0))
            elif config.aggregate == "max":
                sums[i] = sums[left].maximum(sums[right])
            else:
                sums[i] = sums[left] + sums[right]
        aggregates = sp.vstack(sums, format="csr", dtype=np.float32)
        if config.aggregate == "mean":
            sizes = np.array([n[1] - n[0] for n in nodes], dtype=np.float64)
            aggregates = sp.csr_matrix(sp.diags(1.0 / sizes) @ aggregates, dtype=np.float32)
        return cls(index, config, order, np.array(nodes, dtype=np.int64), aggregates)

    # -- persistence --
    def save(self, path: Union[str, Path], overwrite: bool = False) -> Path:
        with atomic_folder(path, overwrite=overwrite, replaceable=lambda p: (p / "tree.json").is_file(),
                           what="tree") as tmp:
            np.save(tmp / "order.npy", self.order)
            np.save(tmp / "nodes.npy", self.nodes)
            sp.save_npz(tmp / "aggregates.npz", self.aggregates, compressed=False)
            write_json(tmp / "tree.json", {"config": self.config.to_dict(), "num_docs": self.index.num_docs,
                                           "num_nodes": len(self.nodes), "index": str(self.index.path)})
        return Path(path)

    @classmethod
    def load(cls, path: Union[str, Path], index: SparseIndex) -> "BinaryTree":
        path = Path(path)
        meta = read_json(path / "tree.json", "tree description")
        config = TreeConfig.from_dict(meta["config"], source=path / "tree.json")
        return cls(index, config, np.load(path / "order.npy"), np.load(path / "nodes.npy"),
                   sp.load_npz(path / "aggregates.npz"))

    # -- search --
    @cached_property
    def postings(self) -> Postings:
        """The index's postings in tree order: a node's documents are one position range."""
        return Postings(self.index.docs, self.order)

    def bounds(self, nodes: np.ndarray, terms: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Dot product of the query with each node's aggregate (for "max": an upper bound of its documents)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if len(self._keys) == 0:
            return np.zeros(len(nodes))
        look = (nodes[:, None] * self.aggregates.shape[1] + np.asarray(terms, np.int64)).ravel()
        idx = np.searchsorted(self._keys, look)
        vals = self.aggregates.data.take(idx, mode="clip") * (self._keys.take(idx, mode="clip") == look)
        return vals.reshape(len(nodes), len(terms)) @ np.asarray(weights, dtype=np.float64)

    def expandable(self, depth: Optional[int] = None, leaf_size: Optional[int] = None) -> np.ndarray:
        """Per node: does a descent limited by ``depth`` and ``leaf_size`` go below it?"""
        out = self.left >= 0
        if depth is not None:
            out &= self.depth < depth
        if leaf_size is not None:
            out &= self.size > leaf_size
        return out

    def descend(self, terms: np.ndarray, weights: np.ndarray, depth: Optional[int] = None,
                leaf_size: Optional[int] = None, beam: int = 1, expandable: Optional[np.ndarray] = None) -> np.ndarray:
        """Node ids reached by the query (disjoint subtrees; nodes whose aggregate shares no term are dropped).

        ``expandable`` is :meth:`expandable` of ``depth`` and ``leaf_size``, when the caller keeps it.
        """
        if expandable is None:
            expandable = self.expandable(depth, leaf_size)
        if beam == 1:
            return self._greedy(terms, weights, expandable)
        frontier = np.zeros(1, dtype=np.int64)
        fb = self.bounds(frontier, terms, weights)
        frontier, fb = frontier[fb > 0], fb[fb > 0]
        while len(frontier):
            done = ~expandable[frontier]
            if done.all():
                break
            opened = frontier[~done]
            kids = np.concatenate([self.left[opened], self.right[opened]])
            cand = np.concatenate([frontier[done], kids])
            cb = np.concatenate([fb[done], self.bounds(kids, terms, weights)])
            cand, cb = cand[cb > 0], cb[cb > 0]
            best = np.lexsort((cand, -cb))[:beam]
            frontier, fb = cand[best], cb[best]
        return frontier

    def _greedy(self, terms: np.ndarray, weights: np.ndarray, expandable: np.ndarray) -> np.ndarray:
        """``descend`` with a beam of 1, one bounds call per level (ties: the left child)."""
        if self.bounds(np.zeros(1, np.int64), terms, weights)[0] <= 0:
            return np.zeros(0, np.int64)
        node = 0
        while expandable[node]:  # a node with a positive bound has a child with a positive bound
            kids = self.nodes[node, 2:4]
            left, right = self.bounds(kids, terms, weights)
            node = int(kids[0] if left >= right else kids[1])
        return np.array([node], dtype=np.int64)

    def retriever(self, num_results: int = 1000, *, depth: Optional[int] = None, leaf_size: Optional[int] = None,
                  beam: int = 1, verbose: bool = False) -> "TreeRetriever":
        """qid, query_toks → + docno, score, rank over the documents of the reached subtrees."""
        return TreeRetriever(self, num_results, depth=depth, leaf_size=leaf_size, beam=beam, verbose=verbose)

    def fingerprint(self) -> str:
        import hashlib

        h = hashlib.sha256(self.order.tobytes())
        h.update(self.nodes.tobytes())
        h.update(self.aggregates.data.tobytes())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        return (f"BinaryTree({self.index!r}, split={self.config.split!r}, aggregate={self.config.aggregate!r}, "
                f"{len(self.nodes)} nodes, depth {int(self.depth.max())})")


class TreeRetriever(SparseSearcher):
    """Learned-sparse retrieval over the documents of the subtrees a query descends to."""

    def __init__(self, tree: BinaryTree, num_results: int = 1000, *, depth: Optional[int] = None,
                 leaf_size: Optional[int] = None, beam: int = 1, verbose: bool = False):
        super().__init__(tree.index, num_results, verbose=verbose)
        depth = int_in_range("depth", depth, 0, none=True)
        leaf_size = positive_int("leaf_size", leaf_size, none=True)
        self.tree, self.depth, self.leaf_size, self.beam = tree, depth, leaf_size, positive_int("beam", beam)

    @cached_property
    def _expandable(self) -> np.ndarray:
        return self.tree.expandable(self.depth, self.leaf_size)

    def reached(self, terms: np.ndarray, weights: np.ndarray) -> np.ndarray:
        return self.tree.descend(terms, weights, self.depth, self.leaf_size, self.beam, self._expandable)

    def ranges(self, terms: np.ndarray, weights: np.ndarray) -> np.ndarray:
        nodes = self.reached(terms, weights)
        return np.stack([self.tree.lo[nodes], self.tree.hi[nodes]], axis=1)

    def candidate_docs(self, terms: np.ndarray, weights: np.ndarray, row: Any = None) -> np.ndarray:
        """The documents below the reached nodes (what this query may score)."""
        ranges = self.ranges(terms, weights)
        if len(ranges) == 0:
            return np.zeros(0, np.int64)
        return np.sort(np.concatenate([self.tree.order[lo:hi] for lo, hi in ranges]))

    def score_candidates(self, terms: np.ndarray, weights: np.ndarray,
                         row: Any = None) -> Tuple[np.ndarray, np.ndarray]:
        ranges = self.ranges(terms, weights)
        if len(ranges) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        return self.tree.postings.score(terms, weights, ranges)

    def params(self) -> tuple:
        return (self.tree.fingerprint(), self.tree.config, self.depth, self.leaf_size, self.beam)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"tree": self.tree, "num_results": self.num_results, "depth": self.depth,
                "leaf_size": self.leaf_size, "beam": self.beam, "verbose": self.verbose}

    def with_num_results(self, k: int) -> "TreeRetriever":
        return TreeRetriever(self.tree, k, depth=self.depth, leaf_size=self.leaf_size, beam=self.beam,
                             verbose=self.verbose)

    def _repr_params(self) -> List[str]:
        out = [f"split={self.tree.config.split!r}"]
        out += [f"{n}={v!r}" for n, v in (("depth", self.depth), ("leaf_size", self.leaf_size)) if v is not None]
        return [*out, f"beam={self.beam}"]
