"""benchmarks/folder_bench.py's pure helpers (the script itself needs real folders and the default checkpoint); the
variants job's are in its neighbour folder_bench_variants.py."""
import doctest
import importlib
import math
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
MODULES = ("folder_bench", "folder_bench_common", "folder_bench_variants")


def _script(name: str = "folder_bench_variants"):
    """The module as the script imports it (benchmarks/ on sys.path, one module object per name in sys.modules, so
    that doctest finds each function in its own module)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def test_plaid_centroids_is_the_largest_power_of_two_not_above_16_sqrt_tokens():
    fb = _script()
    for tokens in (1, 2, 3, 16, 17, 1_000, 23_519, 65_536, 65_537, 897_094, 10**7):
        count = fb.plaid_centroids(tokens)
        bound = 16 * math.sqrt(tokens)
        assert count & (count - 1) == 0  # a power of two
        assert count <= bound < 2 * count


def test_docstring_examples():
    """The script's and its helper modules' docstring examples (benchmarks/ is outside pytest's doctest
    collection)."""
    results = [doctest.testmod(_script(name), optionflags=doctest.NORMALIZE_WHITESPACE) for name in MODULES]
    assert sum(r.attempted for r in results) >= 2 and sum(r.failed for r in results) == 0


def test_the_script_runs_the_variants_job_of_its_neighbour():
    """The split kept one command line: ``variants`` and its ``--searches`` choices come from the helper module."""
    script, variants = _script("folder_bench"), _script()
    assert script.SEARCHES == variants.SEARCHES
    assert script.variants is variants.variants
