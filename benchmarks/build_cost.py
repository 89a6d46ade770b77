"""Per-op build cost of a manifest on this machine: lowering seconds per variant and nvcc seconds per compile unit,
for one arch per process (run one per arch in parallel on a 2-core machine), with the build cache off.

  python benchmarks/build_cost.py --arch sm_90a --out cost-sm_90a.json [--manifest manifests/default.toml]
  python benchmarks/build_cost.py --table cost-sm_90a.json cost-sm_100a.json   (markdown table, slowest ops first)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(manifest_path, arch, out):
    os.environ["KERNELKILN_BUILD_CACHE"] = "off"
    from build_tools import lower, manifest, toolchain, units
    _, variants = manifest.load(manifest_path)
    gen = Path(tempfile.mkdtemp(prefix=f"cost-{arch}-"))
    lowering = []
    for v in variants:
        t0 = time.perf_counter()
        failures = lower.lower_all([v], arch, gen, log=lambda *a: None)
        lowering.append({"op": v.op, "key": v.key, "seconds": time.perf_counter() - t0, "failed": bool(failures)})
    plan = units.plan(variants)
    units.write_sources(gen, plan, arch)
    nvcc = []
    incs = [f"-I{d}" for d in toolchain.tilelang_include_dirs()]
    for u in plan:
        cu = gen / f"{u.name}.{arch}.cu"
        source = toolchain.canonical_source(cu)
        t0 = time.perf_counter()
        subprocess.run(toolchain.nvcc_command(source, gen / f"{u.name}.{arch}.cubin", arch, incs), check=True,
                       capture_output=True)
        nvcc.append({"unit": u.name, "op": u.group, "variants": len(u.stems),
                     "seconds": time.perf_counter() - t0})
    Path(out).write_text(json.dumps({"arch": arch, "manifest": str(manifest_path), "lowering": lowering,
                                     "nvcc": nvcc}, indent=1))


def table(paths):
    rows = defaultdict(lambda: defaultdict(float))
    counts = defaultdict(int)
    arches = []
    for p in paths:
        d = json.loads(Path(p).read_text())
        arches.append(d["arch"])
        for r in d["lowering"]:
            rows[r["op"]][f"lower {d['arch']}"] += r["seconds"]
            if d["arch"] == json.loads(Path(paths[0]).read_text())["arch"]:
                counts[r["op"]] += 1
        for r in d["nvcc"]:
            rows[r["op"]][f"nvcc {d['arch']}"] += r["seconds"]
            rows[r["op"]][f"units {d['arch']}"] += 1
    cols = [f"lower {a}" for a in arches] + [f"nvcc {a}" for a in arches]
    total = {op: sum(v[c] for c in cols) for op, v in rows.items()}
    lines = ["| op | variants/arch | " + " | ".join(f"{c} (s)" for c in cols) + " | lowering s/variant | total (s) |",
             "|---|---|" + "---|" * (len(cols) + 2)]
    for op in sorted(rows, key=lambda o: -total[o]):
        per = sum(rows[op][f"lower {a}"] for a in arches) / (counts[op] * len(arches))
        lines.append(f"| {op} | {counts[op]} | " + " | ".join(f"{rows[op][c]:.1f}" for c in cols)
                     + f" | {per:.2f} | {total[op]:.1f} |")
    grand = {c: sum(v[c] for v in rows.values()) for c in cols}
    lines.append(f"| **all** | {sum(counts.values())} | " + " | ".join(f"{grand[c]:.1f}" for c in cols)
                 + f" | | {sum(grand.values()):.1f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(ROOT / "manifests" / "default.toml"))
    ap.add_argument("--arch")
    ap.add_argument("--out")
    ap.add_argument("--table", nargs="+")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
    else:
        measure(args.manifest, args.arch, args.out)


if __name__ == "__main__":
    main()
