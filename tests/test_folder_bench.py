"""benchmarks/folder_bench.py's pure helpers (the script itself needs real folders and the default checkpoint)."""
import doctest
import importlib.util
import math
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "folder_bench.py"


def _script():
    spec = importlib.util.spec_from_file_location("folder_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plaid_centroids_is_the_largest_power_of_two_not_above_16_sqrt_tokens():
    fb = _script()
    for tokens in (1, 2, 3, 16, 17, 1_000, 23_519, 65_536, 65_537, 897_094, 10**7):
        count = fb.plaid_centroids(tokens)
        bound = 16 * math.sqrt(tokens)
        assert count & (count - 1) == 0  # a power of two
        assert count <= bound < 2 * count


def test_docstring_examples():
    """The script's docstring examples (benchmarks/ is outside pytest's doctest collection)."""
    result = doctest.testmod(_script(), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 2 and result.failed == 0
