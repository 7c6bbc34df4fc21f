"""Run in spawned processes by tests/test_faults.py (a module of its own so that ``spawn`` can import it)."""
import os
import time


def build_ann(path, kind_name, nlist, log, barrier):
    """Open the index at ``path`` and get its ``kind_name`` neighbour index, logging this process's pid to ``log``
    if it builds one (each build is slowed down, so that the processes overlap); returns the neighbours of the
    first stored vectors."""
    from pyterrier_fandom_colbert.index.ann import FaissSpec, as_search_vectors, search
    from pyterrier_fandom_colbert.index.artifact import ColBERTIndex

    spec = FaissSpec(kind_name, nlist=nlist)
    kind = spec.ann_kind
    original = kind.build

    def counting(*args, **kwargs):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.0)
        return original(*args, **kwargs)

    kind.build = counting
    barrier.wait()  # all three look for the cache at the same moment
    index = ColBERTIndex(path)
    ann = index.ann(spec)
    return search(ann, as_search_vectors(index.vectors[:5], True), 3, nlist).tolist()
