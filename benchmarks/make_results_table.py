"""One Markdown table of every benchmark record in a results directory (RESULTS.md next to the JSON).

    python benchmarks/make_results_table.py benchmarks/results/<date>-<sha>

Reads bench_foundation.json, its repeats (bench_foundation_*.json, e.g. a run again on a warm machine)
and every bench_ops_*.json (the per-family scripts write either a
list of records or {"records": [...]}; the copy ceiling is the record named copy_ceiling or the
file's copy_ceiling_gbs). Columns: op, parameters, bytes moved, device time, % of the copy
ceiling measured in the same run. Times not from graph replay are marked "(events)"; a case that
raised shows its error. A side_by_side.json (benchmarks/bench_side_by_side.py) adds a table of the peer beside us:
equality, device times, the ratio and first-call times, with a count of cases equal and at least as fast.
"""
import json
import sys
from pathlib import Path


def _records(data):
    recs = data if isinstance(data, list) else data.get("records", [])
    ceiling = None if isinstance(data, list) else data.get("copy_ceiling_gbs")
    out = []
    for r in recs:
        if not isinstance(r, dict):
            continue
        if r.get("name") == "copy_ceiling":
            ceiling = r.get("bandwidth_gbs")
            continue
        out.append(r)
    return out, ceiling


def _fmt_params(p):
    if not isinstance(p, dict):
        return str(p or "")
    return ", ".join(f"{k}={v}" for k, v in p.items())


def side_by_side_lines(data):
    recs = data.get("records", [])
    done = [r for r in recs if "error" not in r]
    equal = sum(1 for r in done if r.get("equal"))
    faster = sum(1 for r in done if r.get("speedup", 0) >= 1.0)
    lines = [f"## Side by side with tile_kernels {data.get('tile_kernels', '?')} ({data.get('device', '?')})", "",
             f"{len(recs)} cases: {equal} equal, {faster} at least as fast as the peer, {len(recs) - len(done)} failed. "
             "Speedup = peer time / our time (> 1: we are faster); first calls in seconds (peer JIT: its compile, "
             "from the parallel warm-up; peer / ours: the first call in the measuring process).", "",
             "| op | parameters | equal | peer (µs) | ours (µs) | speedup | first call: peer JIT / peer / ours (s) |",
             "|---|---|---|---|---|---|---|"]
    for r in recs:
        if "error" in r:
            lines.append(f"| {r['name']} | {_fmt_params(r.get('params'))} | failed: {r['error'][:160]} | | | | |")
            continue
        fc = r.get("first_call_s", {})
        eq = "yes" if r.get("equal") else f"**no**: {r.get('detail', '')}"
        lines.append(f"| {r['name']} | {_fmt_params(r.get('params'))} | {eq} | {r.get('peer_us')} | "
                     f"{r.get('ours_us')} | {r.get('speedup')} | {fc.get('peer_jit')} / {fc.get('peer')} / "
                     f"{fc.get('ours')} |")
    return lines + [""]


def main(folder):
    folder = Path(folder)
    sha = (folder / "git-sha").read_text().strip()[:10] if (folder / "git-sha").exists() else folder.name
    lines = [f"# Benchmark results ({folder.name}, commit {sha})", "",
             "Device time from CUDA-graph replay (median); bytes = each input read once + each output written once;",
             "% of copy = bandwidth / device-to-device copy ceiling measured in the same script run.", ""]
    files = ([folder / "bench_foundation.json"] + sorted(folder.glob("bench_foundation_*.json"))
             + sorted(folder.glob("bench_ops_*.json")))
    for f in files:
        if not f.exists():
            continue
        recs, ceiling = _records(json.loads(f.read_text()))
        lines += [f"## {f.stem} (copy ceiling {ceiling:.0f} GB/s)" if ceiling else f"## {f.stem}", "",
                  "| op | parameters | bytes | time (µs) | % of copy |", "|---|---|---|---|---|"]
        for r in recs:
            name = r.get("name") or r.get("op") or r.get("kernel")
            if "error" in r:  # a case that raised: its message instead of a time
                lines.append(f"| {name} | {_fmt_params(r.get('params'))} | | failed: {r['error']} | |")
                continue
            t = r.get("time_us", r.get("time_s"))
            unit = "" if "time_us" in r else " s"
            if r.get("method") == "events":  # not graph replay: back-to-back calls between CUDA events
                unit += " (events)"
            pct = r.get("pct_of_copy", "")
            lines.append(f"| {name} | {_fmt_params(r.get('params'))} | {r.get('bytes', '')} | {t}{unit} | {pct} |")
        lines.append("")
    if (folder / "side_by_side.json").exists():
        lines += side_by_side_lines(json.loads((folder / "side_by_side.json").read_text()))
    (folder / "RESULTS.md").write_text("\n".join(lines))
    print(f"wrote {folder / 'RESULTS.md'}")


if __name__ == "__main__":
    main(sys.argv[1])
