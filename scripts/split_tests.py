"""Split test files into N groups of about equal run time, for the parallel pytest processes of the GPU run.

    python3 scripts/split_tests.py N FILE... > one line of space-separated files per group

Durations come from the fullest GPU run committed under benchmarks/results/ (its junit files); a file it did not
time counts as the median. Longest first onto the least loaded group (LPT), so that no group runs past the
device call's limit while others sit idle, as round-robin did.
"""
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _testcases(run):
    return sum(xml.read_text().count("<testcase ") for xml in run.glob("gpu_tests_*.xml"))


def durations():
    """Per-file seconds from the committed run that timed the most tests (a full run, not a rerun of a few files)."""
    runs = [d for d in (ROOT / "benchmarks" / "results").glob("20*") if list(d.glob("gpu_tests_*.xml"))]
    best = max(runs, key=lambda d: (_testcases(d), d.name), default=None)
    times = defaultdict(float)
    for xml in (best.glob("gpu_tests_*.xml") if best else ()):
        for cls, t in re.findall(r'<testcase classname="([^"]+)" name="[^"]*" time="([0-9.]+)"', xml.read_text()):
            times[cls.replace(".", "/") + ".py"] += float(t)
    return times


def split(n, files, times):
    known = [times[f] for f in files if f in times]
    default = statistics.median(known) if known else 1.0
    groups = [[0.0, []] for _ in range(n)]
    for f in sorted(files, key=lambda f: -times.get(f, default)):
        g = min(groups, key=lambda g: g[0])
        g[0] += times.get(f, default)
        g[1].append(f)
    return [g for g in groups if g[1]]


if __name__ == "__main__":
    n, files = int(sys.argv[1]), sys.argv[2:]
    for load, group in split(n, files, durations()):
        print(" ".join(group))
        print(f"group of {load:.0f} s: {len(group)} files", file=sys.stderr)
