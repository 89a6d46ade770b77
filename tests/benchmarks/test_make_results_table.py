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
