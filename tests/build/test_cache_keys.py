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


def test_a_contract_constant_the_kernel_imports_enters_its_key(tmp_path, monkeypatch):
    """kernels/engram/grad_w_reduce.py takes its row count from kernelkiln_contract.engram: editing that module
    must relower it (and only the kernels importing it)."""
    root = tmp_path
    (root / "python" / "kernelkiln_contract").mkdir(parents=True)
    contract = root / "python" / "kernelkiln_contract" / "fam.py"
    contract.write_text("ROWS = 8\n")
    kernel = root / "k.py"
    kernel.write_text("from kernelkiln_contract.fam import ROWS\n")
    other = root / "o.py"
    other.write_text("import tilelang.language as T\n")
    monkeypatch.setattr(cache, "_ROOT", root)
    monkeypatch.setattr(cache, "_shared_digest", lambda: "x")

    class V:
        key = "op(a=1)"

    before = cache.lower_key(V, "sm_90a", kernel), cache.lower_key(V, "sm_90a", other)
    contract.write_text("ROWS = 16\n")
    after = cache.lower_key(V, "sm_90a", kernel), cache.lower_key(V, "sm_90a", other)
    assert before[0] != after[0] and before[1] == after[1]
