"""docs/spec/*.md are generated from the op contracts (build_tools/spec_docs.py): a stale page fails here."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_spec_pages_match_the_contracts():
    r = subprocess.run([sys.executable, "-m", "build_tools.spec_docs", "--check"], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


def test_every_engram_op_has_a_written_specification():
    sys.path.insert(0, str(ROOT / "python"))
    try:
        import kernelkiln_contract
    finally:
        sys.path.pop(0)
    short = [op for op, c in kernelkiln_contract.CONTRACTS.items() if op.startswith(("engram", "fused_weight",
                                                                                      "grad_w_reduce"))
             and len(c.doc) < 200]
    assert not short, f"contracts whose doc is too short to be a specification: {short}"
