"""Build-cache keys follow exactly the kernels/common modules a kernel imports (build_tools/cache.py)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from build_tools import cache  # noqa: E402


@pytest.mark.parametrize("source,expected", [
    ("from kernels.common.numerics import pow2\n", ["numerics.py"]),
    ("from kernels.common import stochastic as sr\n", ["stochastic.py"]),
    ("from kernels.common import numerics, stochastic as s\n", ["numerics.py", "stochastic.py"]),
    ("from kernels.common import (\n    numerics,\n    stochastic,\n)\n", ["numerics.py", "stochastic.py"]),
    ("import kernels.common.block_scale as bs\n", ["block_scale.py", "numerics.py"]),  # transitive
    ("import tilelang.language as T\n", []),
])
def test_common_dependencies_are_found(source, expected):
    assert [p.name for p in cache._common_deps(source)] == expected
