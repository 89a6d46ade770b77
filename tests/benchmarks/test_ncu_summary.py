"""benchmarks/ncu_summary.py on a synthetic `ncu --csv --page raw` export: rows split at the marker kernels,
paired with their labels in order, units converted, stall reasons ranked, verdicts from the thresholds."""
import csv
import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "ncu_summary.py"


def _module():
    spec = importlib.util.spec_from_file_location("ncu_summary", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


HEADER = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
          "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "smsp__issue_active.avg.pct_of_peak_sustained_active",
          "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
          "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
          "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "launch__registers_per_thread"]
UNITS = ["", "", "msecond", "Gbyte", "Mbyte", "%", "%", "", "", "", "register/thread"]


def test_calls_are_split_at_markers_and_labelled(tmp_path):
    mod = _module()
    rows = [["0", "spin_kernel(long)", "0.001", "0", "0", "0", "1", "0", "1", "0", "16"],
            ["1", "per_token_cast_kernel_aaaaaaaaaaaa", "0.0895", "0.2349", "105.4", "88.0", "40.0", "5.6", "1", "1.2",
             "55"],
            ["2", "spin_kernel(long)", "0.001", "0", "0", "0", "1", "0", "1", "0", "16"],
            ["3", "per_token_cast_kernel_bbbbbbbbbbbb", "0.0500", "0.1", "1.0", "50.0", "70.0", "0.5", "1", "2.5", "60"],
            ["4", "cast_back_kernel_cccccccccccc", "0.0100", "0.1", "1.0", "40.0", "20.0", "3.0", "1", "0.5", "48"]]
    with open(tmp_path / "bench_x.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["==PROF== Connected to process"])  # ncu chatter before the table is skipped
        w.writerows([HEADER, UNITS, *rows])
    (tmp_path / "bench_x.labels.jsonl").write_text(
        json.dumps({"name": "per_token_cast", "params": {"g": 128}}) + "\n" +
        json.dumps({"name": "fake_quant", "params": {"g": 32}}) + "\n")
    mod.main(tmp_path)
    table = [line for line in (tmp_path / "PROFILE.md").read_text().splitlines() if line.startswith("| bench_x")]
    assert len(table) == 3
    first, second, third = table
    assert "per_token_cast (g=128)" in first and "aaaaaaaaaaaa" in first
    assert "| 89.50 |" in first and "234.9 / 105.4" in first  # ms -> µs, GB and MB -> MB
    assert "long_scoreboard 5.6, wait 1.2" in first and "selected" not in first
    assert first.rstrip().endswith("| dram |")  # DRAM >= 85 % of peak
    assert "fake_quant (g=32)" in second and second.rstrip().endswith("| issue |")  # issue >= 60 %
    assert "fake_quant (g=32)" in third and third.rstrip().endswith("| latency |")  # the call's second kernel


def test_an_export_without_a_table_gives_no_rows(tmp_path):
    mod = _module()
    (tmp_path / "empty.csv").write_text("==PROF== No kernels were profiled.\n")
    assert mod.read_csv(tmp_path / "empty.csv") == []
