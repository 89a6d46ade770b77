"""% of the measured copy bandwidth per benchmark case, as a horizontal bar chart in plain SVG.

    python benchmarks/plot_results.py [RUN_DIR] [--out docs/perf.svg] [--no-later]

Reads the committed results JSON that benchmarks/make_results_table.py reads (bench_foundation.json, its
repeats, every bench_ops_*.json) and writes one bar per case that has a % of copy: bytes moved / device
time / the device-to-device copy ceiling measured in the same script run.

RUN_DIR (default: the newest full run, i.e. the directory under benchmarks/results/ with the most
bench_ops_*.json files, the newest of those on a tie) gives every case. A case that a later run measured
again (same op and parameters; "later" = a newer `meta.date` in its JSON) shows the later run's figure, in
another colour and with that run's name in its label, so the chart agrees with the README's table, which
quotes the newest figure of each case. --no-later plots RUN_DIR alone.

No plotting library (nothing beyond the standard library) and no timestamps: the same results give the
same bytes, so docs/perf.svg changes only when the results do.
"""
import argparse
import json
import math
import re
import sys
from pathlib import Path
from xml.sax.saxutils import escape

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DEFAULT_OUT = HERE.parent / "docs" / "perf.svg"
RUN_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}-[0-9a-f]{7,40}$")

sys.path.insert(0, str(HERE))
from make_results_table import _records  # noqa: E402  (one reader of the record formats)

# Shapes every benchmark uses unless it says otherwise: left out of the labels, named in the subtitle.
COMMON = {"T": 16384, "tokens": 16384, "H": 7168, "I": 2048, "inter": 2048}
SHAPES = "T (tokens) = 16384, H = 7168, I (inter) = 2048"
DTYPE_NAMES = {"torch.bfloat16": "bf16", "torch.float32": "fp32", "torch.float8_e4m3fn": "e4m3",
               "torch.int32": "int32", "bfloat16": "bf16", "float32": "fp32", "float8_e4m3fn": "e4m3"}
SMALL_BYTES = 100e6  # cases that move less are latency-bound; TARGETS.md compares runs on the others

BASE_COLOUR, LATER_COLOUR = "#4c78a8", "#e45756"


def bench_files(run):
    return ([run / "bench_foundation.json"] + sorted(run.glob("bench_foundation_*.json"))
            + sorted(run.glob("bench_ops_*.json")))


def run_date(run):
    """The newest `meta.date` of the run's benchmark JSON ('' when none has one)."""
    dates = []
    for f in bench_files(run):
        if f.exists():
            data = json.loads(f.read_text())
            if isinstance(data, dict) and isinstance(data.get("meta"), dict):
                dates.append(str(data["meta"].get("date") or ""))
    return max(dates, default="")


def runs():
    return sorted(p for p in RESULTS.iterdir() if p.is_dir() and RUN_NAME.match(p.name))


def newest_full_run():
    candidates = [r for r in runs() if any(r.glob("bench_ops_*.json"))]
    if not candidates:
        sys.exit(f"no results directory with bench_ops_*.json under {RESULTS}")
    return max(candidates, key=lambda r: (len(list(r.glob("bench_ops_*.json"))), run_date(r), r.name))


def case_key(rec):
    return rec.get("name") or rec.get("op") or rec.get("kernel"), json.dumps(rec.get("params"), sort_keys=True)


def cases(run):
    """{key: (file stem, record)} of the run's cases with a % of copy, first occurrence of a key kept."""
    out = {}
    for f in bench_files(run):
        if not f.exists():
            continue
        recs, _ = _records(json.loads(f.read_text()))
        for r in recs:
            if "error" in r or not isinstance(r.get("pct_of_copy"), (int, float)):
                continue
            out.setdefault(case_key(r), (f.stem, r))
    return out


def _value(v):
    if isinstance(v, list):  # a block [128, 128] -> 128x128; a list of shapes -> 4096x7168,7168x2048
        return ",".join(_value(x) for x in v) if any(isinstance(x, list) for x in v) else "x".join(map(str, v))
    return DTYPE_NAMES.get(str(v), str(v))


def label(rec, full=False):
    name = case_key(rec)[0]
    params = rec.get("params")
    if not isinstance(params, dict):
        return f"{name} {params or ''}".strip()
    parts = []
    for k, v in params.items():
        if not full and COMMON.get(k) == v:
            continue
        if v is True:
            parts.append(k)
        elif v is False and not full:
            continue
        else:
            parts.append(f"{k}={_value(v)}")
    text = f"{name}  {' '.join(parts)}".strip()
    if rec.get("method") == "events":
        text += " (events)"
    return text


def collect(base, later=True):
    """[(label, pct, bytes, run name)] in the base run's order; later runs' new cases at the end."""
    chosen = {k: (stem, r, base.name) for k, (stem, r) in cases(base).items()}
    order = list(chosen)
    if later:
        base_date = run_date(base)
        newer = [r for r in runs() if r != base and run_date(r) > base_date]
        for run in sorted(newer, key=lambda r: (run_date(r), r.name)):  # oldest first: the newest one wins
            for k, (stem, r) in cases(run).items():
                if k not in chosen:
                    order.append(k)
                chosen[k] = (stem, r, run.name)
    rows = [(label(chosen[k][1]), chosen[k][1]["pct_of_copy"], chosen[k][1].get("bytes") or 0, chosen[k][2])
            for k in order]
    seen = {}
    for lab, *_ in rows:
        seen[lab] = seen.get(lab, 0) + 1
    # two cases that differ only in a left-out parameter get their full parameters
    return [(label(chosen[k][1], full=True) if seen[row[0]] > 1 else row[0],) + row[1:] for k, row in zip(order, rows)]


def short(run_name):
    return run_name.rsplit("-", 1)[-1]


def svg(rows, base):
    font, row_h, bar_h, char_w = 11, 16, 11, 6.7  # monospace: width of a label = characters x char_w
    labels = [lab + (f"  [{short(run)}]" if run != base.name else "") for lab, _, _, run in rows]
    left = 12 + int(max(len(lab) for lab in labels) * char_w) + 8
    plot_w, top = 520, 78
    x_max = max(110, 10 * math.ceil(max(p for _, p, _, _ in rows) / 10))
    width, height = left + plot_w + 70, top + row_h * len(rows) + 36
    later = sorted({run for *_, run in rows if run != base.name})

    def x(pct):
        return left + plot_w * pct / x_max

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" '
           f'font-size="{font}">',
           f"<title>% of copy bandwidth per benchmark case ({escape(base.name)})</title>",
           "<desc>" + escape(f"Generated by benchmarks/plot_results.py from benchmarks/results/{base.name}"
                             + (f", with later figures from {', '.join(later)}" if later else "")
                             + "; bandwidth = bytes moved / device time (CUDA-graph replay), divided by the "
                             "device-to-device copy ceiling measured in the same script run.") + "</desc>",
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           '<text x="12" y="20" font-size="14" font-weight="bold">H200: % of measured copy bandwidth per '
           'benchmark case</text>',
           f'<text x="12" y="38">{escape(f"run {base.name}; {SHAPES} unless shown")}</text>']
    legend_y = 56
    out.append(f'<rect x="12" y="{legend_y - 9}" width="12" height="10" fill="{BASE_COLOUR}"/>'
               f'<text x="30" y="{legend_y}">{escape(f"run {short(base.name)}")}</text>')
    lx = 30 + int((len(short(base.name)) + 7) * char_w)
    if later:
        txt = f"later run, named in the label ({', '.join(short(r) for r in later)})"
        out.append(f'<rect x="{lx}" y="{legend_y - 9}" width="12" height="10" fill="{LATER_COLOUR}"/>'
                   f'<text x="{lx + 18}" y="{legend_y}">{escape(txt)}</text>')
        lx += 18 + int((len(txt) + 3) * char_w)
    out.append(f'<rect x="{lx}" y="{legend_y - 9}" width="12" height="10" fill="{BASE_COLOUR}" '
               f'fill-opacity="0.4"/><text x="{lx + 18}" y="{legend_y}">moves &lt; 100 MB (latency-bound)</text>')
    bottom = top + row_h * len(rows)
    for pct in range(0, x_max + 1, 10):
        heavy = pct in (0, 100)
        out.append(f'<line x1="{x(pct):.1f}" y1="{top - 4}" x2="{x(pct):.1f}" y2="{bottom}" '
                   f'stroke="{"#333333" if heavy else "#dddddd"}" stroke-width="{1.2 if heavy else 0.8}"/>')
        if pct % 20 == 0:
            out.append(f'<text x="{x(pct):.1f}" y="{bottom + 14}" text-anchor="middle">{pct}</text>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{bottom + 30}" text-anchor="middle">% of copy</text>')
    for i, ((_, pct, nbytes, run), lab) in enumerate(zip(rows, labels)):
        y = top + i * row_h
        colour = BASE_COLOUR if run == base.name else LATER_COLOUR
        opacity = ' fill-opacity="0.4"' if nbytes < SMALL_BYTES else ""
        out.append(f'<text x="{left - 8}" y="{y + bar_h - 1}" text-anchor="end">{escape(lab)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{max(x(pct) - left, 0.5):.1f}" height="{bar_h}" '
                   f'fill="{colour}"{opacity}><title>{escape(f"{lab}: {pct:.1f} % ({run})")}</title></rect>')
        out.append(f'<text x="{x(pct) + 4:.1f}" y="{y + bar_h - 1}" stroke="#ffffff" stroke-width="3" '
                   f'paint-order="stroke">{pct:.1f}</text>')  # a halo where the figure crosses the 100 % line
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", type=Path, help="results directory (default: the newest full run)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"SVG to write (default: {DEFAULT_OUT})")
    ap.add_argument("--no-later", action="store_true", help="plot RUN alone, without later runs' figures")
    args = ap.parse_args(argv)
    base = (args.run or newest_full_run()).resolve()
    rows = collect(base, later=not args.no_later)
    if not rows:
        sys.exit(f"{base}: no benchmark case with a % of copy")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(svg(rows, base))
    n_later = sum(1 for *_, run in rows if run != base.name)
    print(f"wrote {args.out}: {len(rows)} cases from {base.name}"
          + (f", {n_later} of them from later runs" if n_later else ""))


if __name__ == "__main__":
    main()
