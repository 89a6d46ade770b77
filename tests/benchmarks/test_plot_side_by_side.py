"""benchmarks/plot_side_by_side.py: one bar per case, the cross on unequal results, the same bytes every time."""
import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "plot_side_by_side.py"
DATA = {"device": "H200", "tile_kernels": "2.1.0", "records": [
    {"name": "quant.per_token_cast", "params": {"T": 8}, "equal": True, "peer_us": 10.0, "ours_us": 5.0, "speedup": 2.0},
    {"name": "moe.topk_gate", "params": {"E": 256}, "equal": False, "peer_us": 5.0, "ours_us": 10.0, "speedup": 0.5},
    {"name": "mhc.mhc_post_fwd", "params": {}, "error": "RuntimeError: boom"}]}


def test_bars_and_marks(tmp_path):
    spec = importlib.util.spec_from_file_location("plot_side_by_side", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src = tmp_path / "side_by_side.json"
    src.write_text(json.dumps(DATA))
    out = tmp_path / "a.svg"
    mod.main([str(src), "--out", str(out)])
    text = out.read_text()
    assert "2 cases, 1 bitwise equal, 1 at least as fast" in text
    assert text.count("<rect x=") == 2 and mod.FASTER in text and mod.SLOWER in text
    assert ">x moe.topk_gate (E=256)</text>" in text and ">quant.per_token_cast (T=8)</text>" in text
    mod.main([str(src), "--out", str(tmp_path / "b.svg")])
    assert (tmp_path / "b.svg").read_bytes() == out.read_bytes()
