"""benchmarks/make_results_table.py: graph-replay, event-timed and failed records in one table."""
import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "make_results_table.py"


def test_table_marks_event_timings_and_failures(tmp_path):
    spec = importlib.util.spec_from_file_location("make_results_table", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "git-sha").write_text("0123456789abcdef\n")
    (tmp_path / "bench_ops_variants.json").write_text(json.dumps({"copy_ceiling_gbs": 4200.0, "records": [
        {"name": "per_token_cast_back", "params": {"g": 128}, "time_us": 90.5, "bytes": 1000, "pct_of_copy": 93.1},
        {"name": "group_count", "params": {"E": 256}, "time_us": 12.0, "bytes": 10, "pct_of_copy": 0.1,
         "method": "events"},
        {"name": "aux_fi", "params": {"E": 256}, "error": "RuntimeError: boom"}]}))
    mod.main(tmp_path)
    text = (tmp_path / "RESULTS.md").read_text()
    assert "commit 0123456789" in text and "copy ceiling 4200 GB/s" in text
    assert "| per_token_cast_back | g=128 | 1000 | 90.5 | 93.1 |" in text
    assert "| group_count | E=256 | 10 | 12.0 (events) | 0.1 |" in text
    assert "| aux_fi | E=256 | | failed: RuntimeError: boom | |" in text


def test_side_by_side_table_counts_equal_and_faster(tmp_path):
    spec = importlib.util.spec_from_file_location("make_results_table", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "side_by_side.json").write_text(json.dumps({"device": "H200", "tile_kernels": "2.1.0", "records": [
        {"name": "quant.per_token_cast", "params": {"T": 8}, "equal": True, "detail": "bitwise", "peer_us": 10.0,
         "ours_us": 8.0, "speedup": 1.25, "first_call_s": {"peer_jit": 9.1, "peer": 0.2, "ours": 0.001}},
        {"name": "moe.topk_gate", "params": {"E": 256}, "equal": False, "detail": "result 0: 3 bytes differ",
         "peer_us": 5.0, "ours_us": 6.0, "speedup": 0.833, "first_call_s": {}},
        {"name": "mhc.mhc_post_fwd", "params": {}, "error": "RuntimeError: boom"}]}))
    mod.main(tmp_path)
    text = (tmp_path / "RESULTS.md").read_text()
    assert "3 cases: 1 equal, 1 at least as fast as the peer, 1 failed." in text
    assert "| quant.per_token_cast | T=8 | yes | 10.0 | 8.0 | 1.25 | 9.1 / 0.2 / 0.001 |" in text
    assert "| moe.topk_gate | E=256 | **no**: result 0: 3 bytes differ | 5.0 | 6.0 | 0.833 |" in text
    assert "| mhc.mhc_post_fwd |  | failed: RuntimeError: boom |" in text
