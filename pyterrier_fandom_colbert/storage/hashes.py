"""The whole-file checksum algorithms a manifest may name (:data:`HASH_ALGORITHM` for new ones)."""
from __future__ import annotations

import hashlib
from typing import Any

#: the content checksum recorded for artifact files: XXH3-128 from xxhash, 13-19x the speed of
#: hashlib's blake2b (docs/experiments/index.md); not cryptographic: it detects damage, not tampering
HASH_ALGORITHM = "xxh3_128"
#: algorithms a manifest may name (older or other writers); new manifests use HASH_ALGORITHM
HASH_ALGORITHMS = ("xxh3_128", "blake2b")
_HASH_CHUNK = 1 << 22


def new_hasher(algorithm: str = HASH_ALGORITHM) -> Any:
    """A streaming hash object (``update``, ``hexdigest``) for a manifest algorithm name."""
    if algorithm == "xxh3_128":
        import xxhash

        return xxhash.xxh3_128()
    if algorithm == "blake2b":
        return hashlib.blake2b(digest_size=16)
    raise ValueError(f"unknown checksum algorithm {algorithm!r}; expected one of {HASH_ALGORITHMS}")


