"""Command line of the AOT compiler. The wheel build (CMakeLists.txt) calls these same steps.

  python -m build_tools plan    --manifest M [--arches sm_90a,sm_100a] --cmake-out plan.cmake
  python -m build_tools lower   --manifest M --arch sm_90a --gen-dir G --stamp S
  python -m build_tools package --manifest M --gen-dir G --out-dir O [--arches ...]
  python -m build_tools build   --manifest M --out-dir O [--arches ...] [-j N]   (no CMake: lower + ninja + package)
  python -m build_tools build   ... --shard i/n   (a deterministic slice, for a CI matrix)
  python -m build_tools merge   --out-dir O STORE [STORE ...]   (combine shard stores; conflicts fail)
  python -m build_tools nvcc    --arch A --cu K.cu --out K.cubin [--include -I...]  (one cached compile)

Lowered sources and cubins go through the content-addressed cache of build_tools/cache.py.
"""
import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from build_tools import cache, manifest, toolchain


def _plan(args):
    arches, variants = manifest.load(args.manifest)
    if args.arches:
        arches = args.arches.split(",")
    return arches, variants


def _cmake_list(items):
    return ";".join(str(i).replace(";", r"\;") for i in items)


def cmd_plan(args):
    arches, variants = _plan(args)
    toolchain.find_nvcc()  # fail at configure time, with the install hint, if there is no nvcc
    lines = [f"set(TK_ARCH_LIST \"{_cmake_list(arches)}\")",
             f"set(TK_INCLUDE_FLAGS \"{_cmake_list('-I' + d for d in toolchain.tilelang_include_dirs())}\")",
             f"set(TK_STEMS \"{_cmake_list(v.stem for v in variants)}\")"]
    Path(args.cmake_out).write_text("\n".join(lines) + "\n")
    print(f"plan: {len(variants)} variants x {len(arches)} arches = {len(variants) * len(arches)} cubins")


def cmd_lower(args):
    _, variants = _plan(args)
    failures = manifest_lower(variants, args.arch, args.gen_dir)
    if failures:
        sys.exit(f"{len(failures)} variant(s) failed to lower for {args.arch}")
    if args.stamp:
        Path(args.stamp).write_text("ok\n")


def manifest_lower(variants, arch, gen_dir):
    from build_tools import lower  # imports tilelang lazily (inside lower_variant)
    return lower.lower_all(variants, arch, gen_dir)


def cmd_package(args):
    from build_tools import package
    arches, variants = _plan(args)
    package.package(args.gen_dir, args.out_dir, {a: [v.stem for v in variants] for a in arches}, args.manifest)


def _cubin_key(cu, arch):
    return cache.cubin_key(cu.read_bytes(), arch, toolchain.nvcc_version(), toolchain.NVCC_FLAGS)


def _cubins_from_cache(gen, stems):
    """Place cached cubins next to their sources (newer than the .cu, so ninja skips them)."""
    n = 0
    for a, names in stems.items():
        for s in names:
            cu, cubin = gen / f"{s}.{a}.cu", gen / f"{s}.{a}.cubin"
            if cubin.exists() and cubin.stat().st_mtime >= cu.stat().st_mtime:
                continue
            data = cache.get(_cubin_key(cu, a), "kernel.cubin")
            if data is not None:
                cubin.write_bytes(data)
                n += 1
    return n


def _cubins_to_cache(gen, stems):
    for a, names in stems.items():
        for s in names:
            cu = gen / f"{s}.{a}.cu"
            key = _cubin_key(cu, a)
            if cache.get(key, "kernel.cubin") is None:
                cache.put(key, "kernel.cubin", (gen / f"{s}.{a}.cubin").read_bytes())


def cmd_nvcc(args):
    """One cached nvcc compile (the CMake build's per-kernel rule)."""
    cu, out = Path(args.cu), Path(args.out)
    key = _cubin_key(cu, args.arch)
    data = cache.get(key, "kernel.cubin")
    if data is None:
        subprocess.run(toolchain.nvcc_command(cu, out, args.arch, args.include), check=True)
        cache.put(key, "kernel.cubin", out.read_bytes())
    else:
        out.write_bytes(data)


def _write_ninja(path, gen_dir, stems):
    lines = [f"rule nvcc\n  command = {' '.join(toolchain.nvcc_command('$in', '$out', '$arch'))}\n"
             "  description = nvcc $out\n"]
    for a, names in stems.items():
        for s in names:
            base = Path(gen_dir) / f"{s}.{a}"
            lines.append(f"build {base}.cubin: nvcc {base}.cu\n  arch = {a}\n")
    Path(path).write_text("\n".join(lines))


def _shard(arches, variants, spec):
    """{arch: [variants]} of shard ``i/n``: a deterministic slice of the sorted (arch, variant) jobs."""
    jobs = sorted(((a, v) for a in arches for v in variants), key=lambda j: (j[0], j[1].stem))
    i, n = (int(x) for x in spec.split("/")) if spec else (0, 1)
    if not 0 <= i < n:
        sys.exit(f"--shard must be i/n with 0 <= i < n, got {spec}")
    work = {a: [] for a in arches}
    for k, (a, v) in enumerate(jobs):
        if k % n == i:
            work[a].append(v)
    return work


def cmd_build(args):
    """Everything without CMake: one lowering process per arch, then ninja -jN nvcc, then package."""
    from build_tools import package
    t0 = time.time()
    arches, variants = _plan(args)
    work = _shard(arches, variants, args.shard)
    gen = Path(args.gen_dir or Path(args.out_dir).with_name(Path(args.out_dir).name + "-gen"))
    gen.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=len(arches)) as pool:
        results = list(pool.map(manifest_lower, [work[a] for a in arches], arches, [str(gen)] * len(arches)))
    failed = [f for r in results for f in r]
    if failed:
        sys.exit(f"{len(failed)} variant(s) failed to lower")
    t1 = time.time()
    stems = {a: [v.stem for v in work[a]] for a in arches}
    cached = _cubins_from_cache(gen, stems)
    _write_ninja(gen / "build.ninja", gen, stems)
    ninja = os.environ.get("NINJA", "ninja")
    subprocess.run([ninja, "-C", str(gen), f"-j{args.jobs or os.cpu_count()}"], check=True)
    _cubins_to_cache(gen, stems)
    t2 = time.time()
    total = sum(len(v) for v in stems.values())
    print(f"build: {cached} of {total} cubins from the build cache")
    package.package(gen, args.out_dir, stems, args.manifest)
    print(f"build: {total} cubins; lower {t1 - t0:.1f}s, nvcc {t2 - t1:.1f}s, total {time.time() - t0:.1f}s")


def cmd_merge(args):
    """Combine shard stores into one; the same variant built twice must be byte-identical."""
    from build_tools import package
    package.merge([Path(d) for d in args.stores], Path(args.out_dir))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m build_tools", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, fn in (("plan", cmd_plan), ("lower", cmd_lower), ("package", cmd_package), ("build", cmd_build),
                     ("nvcc", cmd_nvcc), ("merge", cmd_merge)):
        sp = sub.add_parser(name)
        sp.set_defaults(fn=fn)
        sp.add_argument("--manifest", default=str(manifest.default_manifest_path()))
        sp.add_argument("--arches", default=None, help="comma-separated; default: the manifest's [build] arches")
    sub.choices["plan"].add_argument("--cmake-out", required=True)
    sub.choices["lower"].add_argument("--arch", required=True, choices=manifest.SUPPORTED_ARCHES)
    sub.choices["lower"].add_argument("--gen-dir", required=True)
    sub.choices["lower"].add_argument("--stamp")
    sub.choices["package"].add_argument("--gen-dir", required=True)
    sub.choices["package"].add_argument("--out-dir", required=True)
    sub.choices["build"].add_argument("--out-dir", required=True)
    sub.choices["build"].add_argument("--gen-dir")
    sub.choices["build"].add_argument("-j", "--jobs", type=int)
    sub.choices["build"].add_argument("--shard", help="i/n: build the i-th of n deterministic slices")
    sub.choices["merge"].add_argument("--out-dir", required=True)
    sub.choices["merge"].add_argument("stores", nargs="+", help="kernel stores written by build --shard")
    sub.choices["nvcc"].add_argument("--arch", required=True, choices=manifest.SUPPORTED_ARCHES)
    sub.choices["nvcc"].add_argument("--cu", required=True)
    sub.choices["nvcc"].add_argument("--out", required=True)
    sub.choices["nvcc"].add_argument("--include", action="append", help="-I<dir> flags (default: tilelang's)")
    args = p.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
