"""Summarize Nsight Compute profiles of the benchmarks into one table of measured limits per kernel.

`scripts/gpu_verify.sh device` with PROFILE_BENCHES runs those benchmark scripts under ncu: each measured
case is called once in a profiled range behind a marker kernel (bench_foundation.profile_once), with
the sections SpeedOfLight, LaunchStats, Occupancy, WarpStateStats and SchedulerStats plus DRAM bytes,
and each report is exported as CSV (`--page raw`). This script splits the rows at the markers, pairs
each call with its label, and writes per kernel: time, DRAM bytes and throughput, issue-slot use,
occupancy and the top warp stall reasons, then a verdict of what limits it:

* ``dram``: DRAM throughput >= 85 % of peak (at the roofline; only fewer bytes would help);
* ``issue``: the schedulers issue in >= 60 % of cycles (instruction-bound: fewer instructions);
* ``latency``: neither (too little memory in flight: occupancy, dependency stalls, tail).

    python benchmarks/ncu_summary.py benchmarks/results/<run>/profile   # writes PROFILE.md there
"""
import csv
import json
import re
import sys
from pathlib import Path

_STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio")
_FIELDS = {
    "time_us": ("gpu__time_duration.sum",),
    "dram_read": ("dram__bytes_read.sum",),
    "dram_write": ("dram__bytes_write.sum",),
    "dram_pct": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                 "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    "issue_pct": ("smsp__issue_active.avg.pct_of_peak_sustained_active",),
    "occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "theoretical_occupancy_pct": ("sm__maximum_warps_per_active_cycle_pct",),
    "registers": ("launch__registers_per_thread",),
    "grid": ("launch__grid_size",),
    "block": ("launch__block_size",),
    "waves": ("launch__waves_per_multiprocessor",),
}
_UNIT = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}


def _number(text):
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def read_csv(path):
    """Rows of an `ncu --csv --page raw` export as {metric: (value, unit)} plus the kernel name."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        return []
    header, units = rows[start], rows[start + 1]
    out = []
    for r in rows[start + 2:]:
        if len(r) != len(header):
            continue
        out.append({h: (v, u) for h, v, u in zip(header, r, units)})
    return out


def summarize(row):
    s = {"kernel": row["Kernel Name"][0]}
    for key, names in _FIELDS.items():
        for n in names:
            if n in row:
                v, unit = row[n]
                x = _number(v)
                if x is not None and key in ("time_us", "dram_read", "dram_write"):
                    x *= _UNIT.get(unit, 1.0)
                s[key] = x
                break
    stalls = []
    for name, (v, _) in row.items():
        m = _STALL.fullmatch(name)
        x = _number(v)
        if m and x is not None and not m.group(1).startswith(("selected", "not_selected")):
            stalls.append((x, m.group(1)))
    s["top_stalls"] = ", ".join(f"{n} {x:.1f}" for x, n in sorted(stalls, reverse=True)[:3])
    dram, issue = s.get("dram_pct") or 0, s.get("issue_pct") or 0
    s["verdict"] = "dram" if dram >= 85 else ("issue" if issue >= 60 else "latency")
    return s


def calls(rows, labels):
    """[(label, [kernel summaries])]: rows split at the marker kernels, in order, paired with the labels."""
    groups = []
    for row in rows:
        if "spin_kernel" in row["Kernel Name"][0]:
            groups.append([])
        elif groups:
            groups[-1].append(summarize(row))
    return [(labels[i] if i < len(labels) else "?", g) for i, g in enumerate(groups)]


def _label(entry):
    params = ", ".join(f"{k}={v}" for k, v in (entry.get("params") or {}).items())
    return f"{entry.get('name', '?')} ({params})"


def table(cases):
    head = ("| case | kernel | grid x block | regs | time µs | DRAM read / write MB | DRAM % peak | issue % | "
            "occupancy % (achieved / theoretical) | top stalls (warps per issue) | verdict |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for label, s in cases:
        def f(key, fmt="{:.1f}"):
            v = s.get(key)
            return fmt.format(v) if isinstance(v, float) else "?"
        lines.append(
            f"| {label} | `{s['kernel'][:60]}` | {f('grid', '{:.0f}')} x {f('block', '{:.0f}')} "
            f"| {f('registers', '{:.0f}')} | {f('time_us', '{:.2f}')} "
            f"| {(s.get('dram_read') or 0) / 1e6:.1f} / {(s.get('dram_write') or 0) / 1e6:.1f} "
            f"| {f('dram_pct')} | {f('issue_pct')} | {f('occupancy_pct')} / {f('theoretical_occupancy_pct')} "
            f"| {s['top_stalls']} | {s['verdict']} |")
    return "\n".join(lines) + "\n"


def main(directory):
    d = Path(directory)
    cases = []
    for path in sorted(d.glob("*.csv")):
        label_file = path.with_suffix(".labels.jsonl")
        labels = [_label(json.loads(x)) for x in label_file.read_text().splitlines()] if label_file.exists() else []
        for label, kernels in calls(read_csv(path), labels):
            cases += [(f"{path.stem}: {label}", k) for k in kernels]
    text = ("# Nsight Compute profile of the benchmarks' cases\n\n"
            "One call of each case, `ncu --clock-control none`; verdicts as in `benchmarks/ncu_summary.py`.\n\n"
            + table(cases))
    (d / "PROFILE.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1])
