"""Where a variant's lowering time goes: seconds per top-level TileLang pass, in pipeline order, and with --z3 the
seconds TileLang's Z3 prover spends per pass by verdict (proved / gave up at its resource limit / disproved).

  python benchmarks/lowering_profile.py --ops top2_sum_gate,swiglu_backward [--variants 1] [--arch sm_90a] [--z3]
  python benchmarks/lowering_profile.py --survey --z3 --out survey.json   (the first variant of every op)
  python benchmarks/lowering_profile.py --ops per_token_cast --variants 5 --cprofile   (Python-side costs: the
      whole lowering as the build does it, sharing proof included, after one warm-up variant; set
      KERNELKILN_FRONTEND_MEMO=off to see the front end without build_tools/frontend_memo.py)

--z3 re-executes the script under LD_PRELOAD of benchmarks/z3_verdicts.c (compiled here with cc), which times each
Z3 check; nothing else changes, except that it turns the build's remembered Z3 answers off (build_tools/z3memo.c;
without --z3 they are on, as in the build, unless KERNELKILN_Z3_MEMO=off). Run it on a quiet machine: the figures
are wall seconds.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHIM_SRC = Path(__file__).with_name("z3_verdicts.c")


def _shim_path():
    out = Path(os.environ.get("TMPDIR", "/tmp")) / "kernelkiln-z3-verdicts.so"
    if not out.exists() or out.stat().st_mtime < SHIM_SRC.stat().st_mtime:
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(out), str(SHIM_SRC), "-ldl"], check=True)
    return out


class Z3:
    """Running sums of the shim, or zeros without it."""

    def __init__(self, enabled):
        self.lib = ctypes.CDLL(str(_shim_path())) if enabled else None
        self.buf = (ctypes.c_double * 6)()

    def read(self):
        if self.lib is None:
            return [0.0] * 6
        self.lib.z3_verdicts_get(self.buf)
        return list(self.buf)


def profile(variant, arch, z3):
    """(total seconds, [(pass, seconds, z3 proved/undef/sat seconds, undef count)]) of one lowering."""
    from tilelang import tvm  # noqa: F401  (tvm.ir below is TileLang's)
    import tvm.ir.transform as irt

    from build_tools import lower
    rows, depth = [], [0]
    real_call = irt.Pass.__call__

    def timed(self, mod):
        depth[0] += 1
        t0, z0 = time.perf_counter(), z3.read()
        try:
            return real_call(self, mod)
        finally:
            depth[0] -= 1
            if depth[0] == 0:  # top-level passes only: nested ones are inside their parent's time
                z1 = z3.read()
                rows.append((self.info.name, time.perf_counter() - t0, *(b - a for a, b in zip(z0[:3], z1[:3])),
                             z1[4] - z0[4]))
    irt.Pass.__call__ = timed
    try:
        t0 = time.perf_counter()
        lower.lower_variant(variant, arch)
        return time.perf_counter() - t0, rows
    finally:
        irt.Pass.__call__ = real_call


def _cprofile(picked, arch):
    """Seconds per variant of lower_variant (sharing with sm_100a, as the build lowers sm_90a) and the cumulative
    cProfile entries above 5 % of the time; the first variant only warms the process up."""
    import cProfile
    import pstats

    from build_tools import lower
    share = "sm_100a" if arch == "sm_90a" else None
    lower.lower_variant(picked[0], arch, share)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for v in picked[1:]:
        lower.lower_variant(v, arch, share)
    prof.disable()
    n = max(1, len(picked) - 1)
    print(f"{(time.perf_counter() - t0) / n:.3f} s per variant over {n} variants [{arch}]")
    stats = pstats.Stats(prof)
    total = stats.total_tt
    rows = sorted(((ct, nc, fn) for fn, (_, nc, _, ct, _) in stats.stats.items() if ct >= 0.05 * total),
                  reverse=True)
    for ct, nc, (path, line, name) in rows[:25]:
        print(f"  {ct / n:7.3f} s/variant  {nc:7d} calls  {name} ({Path(path).name}:{line})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", default="")
    p.add_argument("--variants", type=int, default=1, help="variants per op (the manifest's first ones)")
    p.add_argument("--survey", action="store_true", help="the first variant of every op; one line each")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--manifest", default=str(ROOT / "manifests" / "default.toml"))
    p.add_argument("--z3", action="store_true")
    p.add_argument("--out")
    p.add_argument("--min-seconds", type=float, default=0.05)
    p.add_argument("--cprofile", action="store_true", help="cProfile of lower_variant over --ops' variants")
    args = p.parse_args()
    if args.z3:  # the timing shim and the build's remembered answers (build_tools/z3memo.c) cannot both interpose
        os.environ["KERNELKILN_Z3_MEMO"] = "off"
    if args.z3 and "KERNELKILN_Z3_SHIM" not in os.environ:
        env = dict(os.environ, LD_PRELOAD=str(_shim_path()), KERNELKILN_Z3_SHIM="1")
        sys.exit(subprocess.run([sys.executable, *sys.argv], env=env).returncode)
    os.environ["KERNELKILN_BUILD_CACHE"] = "off"
    from build_tools import manifest
    _, variants = manifest.load(args.manifest)
    z3 = Z3(args.z3)
    if args.survey:
        picked = list({v.op: v for v in reversed(variants)}.values())[::-1]
    else:
        ops = args.ops.split(",")
        picked = [v for op in ops for v in [v for v in variants if v.op == op][:args.variants]]
    if args.cprofile:
        return _cprofile(picked, args.arch)
    results = []
    for v in picked:
        total, rows = profile(v, args.arch, z3)
        z = [sum(r[i] for r in rows) for i in (2, 3, 4)]
        results.append({"op": v.op, "key": v.key, "arch": args.arch, "seconds": total, "z3_proved_s": z[0],
                        "z3_undef_s": z[1], "z3_sat_s": z[2], "z3_undef_n": sum(r[5] for r in rows),
                        "passes": [{"pass": r[0], "s": r[1], "z3_undef_s": r[3], "z3_sat_s": r[4]} for r in rows]})
        print(f"{v.key} [{args.arch}]: {total:.2f} s" + (f", Z3 proved {z[0]:.2f} s, gave up {z[1]:.2f} s, "
                                                       f"disproved {z[2]:.2f} s" if args.z3 else ""), flush=True)
        if not args.survey:
            for i, r in enumerate(rows):
                if r[1] >= args.min_seconds:
                    extra = f"   Z3 gave up {r[3]:.3f} s ({int(r[5])}), disproved {r[4]:.3f} s" if args.z3 else ""
                    print(f"  #{i:3d} {r[1]:7.3f} s  {r[0]:34s}{extra}")
    if args.out:  # one line per variant; passes under 10 ms left out
        for r in results:
            r["passes"] = [q for q in r["passes"] if q["s"] >= 0.01]
        Path(args.out).write_text("[\n" + ",\n".join(json.dumps(r) for r in results) + "\n]\n")


if __name__ == "__main__":
    main()
