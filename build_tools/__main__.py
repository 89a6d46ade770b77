"""Command line of the AOT compiler. The wheel build (CMakeLists.txt) calls these same steps.

  python -m build_tools plan    --manifest M [--arches sm_90a,sm_100a] --cmake-out plan.cmake
  python -m build_tools lower   --manifest M --arch sm_90a --gen-dir G --stamp S
  python -m build_tools package --manifest M --gen-dir G --out-dir O [--arches ...]
  python -m build_tools build   --manifest M --out-dir O [--arches ...] [-j N]   (no CMake: lower + ninja + package)
  python -m build_tools build   ... --shard i/n   (a deterministic slice, for a CI matrix)
  python -m build_tools merge   --out-dir O STORE [STORE ...]   (combine shard stores; conflicts fail)
  python -m build_tools nvcc    --arch A --cu K.cu --out K.cubin [--include -I...]  (one cached compile)
  python -m build_tools check-store --store S [--arches ...]   (verify a prebuilt store: KERNELKILN_PREBUILT_STORE)
  python -m build_tools ascend-wheel --store S --out-dir D   (the kernelkiln-ascend wheel: docs/ASCEND.md)

--arches may name Ascend targets (dav-3510) beside CUDA arches: the manifest's [build] ascend targets and its
[[ascend.<op>]] tables are lowered to AscendC on any machine and compiled where bisheng is found (build_tools/ascend.py).

--preset NAME instead of --manifest M takes manifests/presets/NAME.toml (e.g. deepseek-v3, kimi-k2).
`build` shows live progress (one redrawn line on a TTY, a line every 10 s in logs) and a summary; a failed
kernel fails the build with its variant key, parameters and the lowering traceback or nvcc output.

Lowered sources and cubins go through the content-addressed cache of build_tools/cache.py.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from build_tools import ascend, cache, manifest, progress, toolchain, units


PRESET_DIR = manifest.default_manifest_path().parent / "presets"


def presets():
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def preset_path(name):
    path = PRESET_DIR / f"{name}.toml"
    if not path.is_file():
        sys.exit(f"unknown preset {name!r}; presets: {presets()} (manifests/presets/)")
    return path


def _plan(args):
    arches, variants = manifest.load(args.manifest)
    if args.arches:  # --arches may name Ascend targets too (build_tools/ascend.py builds those)
        arches = [a for a in args.arches.split(",") if a not in ascend.TARGETS]
    return arches, variants


def _cmake_list(items):
    return ";".join(str(i).replace(";", r"\;") for i in items)


def cmd_plan(args):
    arches, variants = _plan(args)
    toolchain.find_nvcc()  # fail at configure time, with the install hint, if there is no nvcc
    lines = [f"set(TK_ARCH_LIST \"{_cmake_list(arches)}\")",
             f"set(TK_INCLUDE_FLAGS \"{_cmake_list('-I' + d for d in toolchain.tilelang_include_dirs())}\")",
             f"set(TK_UNITS \"{_cmake_list(u.name for u in units.plan(variants))}\")"]
    Path(args.cmake_out).write_text("\n".join(lines) + "\n")
    n_units = len(units.plan(variants))
    print(f"plan: {len(variants)} variants x {len(arches)} arches = {len(variants) * len(arches)} kernels "
          f"in {n_units * len(arches)} compile units")


def cmd_lower(args):
    """One arch's lowering (CMake's per-arch rule) in ``--jobs`` processes: progress lines and failures with their
    spec."""
    _, variants = _plan(args)
    prog = progress.Progress(len(variants), label=f"lower {args.arch}", interval=args.progress_interval,
                             steps=("lower",))
    Path(args.gen_dir).mkdir(parents=True, exist_ok=True)
    _lower_parallel({args.arch: variants}, Path(args.gen_dir).resolve(), prog, args.jobs)
    if prog.failures:
        _fail_build(prog)
    units.write_sources(args.gen_dir, units.plan(variants), args.arch)
    prog.finish()
    if args.stamp:
        Path(args.stamp).write_text("ok\n")


def cmd_package(args):
    from build_tools import package
    arches, variants = _plan(args)
    package.package(args.gen_dir, args.out_dir, {a: units.plan(variants) for a in arches}, args.manifest)


def _cubin_key(cu, arch):
    # the source's fixed path enters the key: cubins compiled from other paths may differ (toolchain.py)
    return cache.cubin_key(cu.read_bytes(), arch, toolchain.nvcc_version(),
                           (*toolchain.NVCC_FLAGS, f"source-dir={toolchain.CANONICAL_SOURCE_ROOT}"))


def _cubins_from_cache(gen, names_by_arch):
    """Place cached unit cubins next to their sources; returns (units placed, {arch: [unit names to compile]}).

    Cached cubins are left out of build.ninja altogether: ninja rebuilds any output it has no
    log entry for (a fresh gen dir, a CI shard), however new the file is."""
    n, todo = 0, {}
    for a, names in names_by_arch.items():
        todo[a] = []
        for s in names:
            cubin = gen / f"{s}.{a}.cubin"
            data = cache.get(_cubin_key(gen / f"{s}.{a}.cu", a), "kernel.cubin")
            if data is None:
                todo[a].append(s)
                continue
            if not cubin.exists() or cubin.read_bytes() != data:
                cubin.write_bytes(data)
            n += 1
    return n, todo


def _cubins_to_cache(gen, names_by_arch):
    for a, names in names_by_arch.items():
        for s in names:
            cu = gen / f"{s}.{a}.cu"
            key = _cubin_key(cu, a)
            if cache.get(key, "kernel.cubin") is None:
                cache.put(key, "kernel.cubin", (gen / f"{s}.{a}.cubin").read_bytes())


def cmd_nvcc(args):
    """One cached nvcc compile (the CMake build's per-unit rule); a failure names the unit's variants."""
    cu, out = Path(args.cu), Path(args.out)
    key = _cubin_key(cu, args.arch)
    data = cache.get(key, "kernel.cubin")
    if data is None:
        with toolchain.canonical_lock(toolchain.CANONICAL_SOURCE_ROOT / cu.stem):
            source = toolchain.canonical_source(cu)  # a fixed path: nvcc's output depends on the source's path
            r = subprocess.run(toolchain.nvcc_command(source, out, args.arch, args.include), capture_output=True,
                               text=True)
        if r.returncode:
            keys = []
            for stem in units.member_stems(cu.read_text()):
                spec_path = cu.parent / f"{stem}.{args.arch}.json"
                keys.append(json.loads(spec_path.read_text())["key"] if spec_path.exists() else stem)
            f = progress.Failure("nvcc", f"{cu.name} (" + "; ".join(keys) + ")", args.arch, None,
                                 r.stdout + r.stderr)
            sys.exit(f.report())
        cache.put(key, "kernel.cubin", out.read_bytes())
    else:
        out.write_bytes(data)


def cmd_check_store(args):
    """Verify a prebuilt kernel store (index.json + cubins, sha256 of each) before it is packaged."""
    from build_tools import package
    arches = [a for a in args.arches.split(",") if a not in ascend.TARGETS] if args.arches else None
    try:
        index = package.check_store(Path(args.store), arches)
        asc = ascend.check_store(Path(args.store))
    except (package.PackageError, ascend.AscendError) as e:
        sys.exit(f"check-store: {e}")
    print(f"check-store: {args.store}: {len(index['variants'])} cubins for {index['arches']} verified")
    if asc is not None:
        print(f"check-store: {args.store}/ascend: {len(asc['variants'])} Ascend binaries ({asc['status']}) verified")


def _write_ninja(path, gen_dir, names_by_arch):
    lines = [f"rule nvcc\n  command = {toolchain.ninja_nvcc_command()}\n"
             "  description = nvcc $out\n"]
    for a, names in names_by_arch.items():
        for s in names:
            base = Path(gen_dir) / f"{s}.{a}"
            lines.append(f"build {base}.cubin: nvcc {base}.cu\n  arch = {a}\n  stem = {s}.{a}\n  name = {s}.{a}.cu\n")
    Path(path).write_text("\n".join(lines))


def _shard(arches, variants, spec):
    """{arch: [units]} of shard ``i/n``: a deterministic slice of the sorted (arch, compile unit) jobs.
    Whole units, planned from the whole manifest, so shards + merge give the bytes of one build."""
    jobs = sorted(((a, u) for a in arches for u in units.plan(variants)), key=lambda j: (j[0], j[1].name))
    i, n = (int(x) for x in spec.split("/")) if spec else (0, 1)
    if not 0 <= i < n:
        sys.exit(f"--shard must be i/n with 0 <= i < n, got {spec}")
    work = {a: [] for a in arches}
    for k, (a, u) in enumerate(jobs):
        if k % n == i:
            work[a].append(u)
    return work


def _lower_worker(variants, arch, gen_dir, queue, share_with=None, shareable=None):
    """One slice of one arch's lowering, in a process of its own; events go to the parent's progress display."""
    from build_tools import archshare, lower

    def report(event, v, a, message):
        queue.put((event, v.key, a, v.as_dict(), message))
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if archshare.explain() else (lambda *a: None)
    lower.lower_all(variants, arch, gen_dir, log=log, report=report, share_with=share_with, shareable=shareable)


def _lowering_slices(work, jobs):
    """[(arch, [variants])]: each arch's variants cut into round-robin slices, one lowering process each.

    The ``jobs`` processes are shared out over the arches in proportion to their uncached variants (at least one
    per arch with work), so a one-arch CI shard on a 2-core runner lowers in two processes, not one. Round-robin
    over the manifest's order spreads the variants of each op (which cost alike) evenly. Variants taken from the
    build cache cost nothing and are not counted. The output does not depend on the split."""
    pending = {a: [v for v in vs if not _lowered_in_cache(v, a)] for a, vs in work.items() if vs}
    arches = sorted(pending)
    if not arches:
        return []
    share = {a: 1 for a in arches}
    for _ in range(max(0, (jobs or 1) - len(arches))):  # give each further process to the arch worst off
        a = max(arches, key=lambda a: (len(pending[a]) / share[a], a))
        if len(pending[a]) <= share[a]:
            break
        share[a] += 1
    slices = []
    for a in arches:
        n, todo = share[a], set(id(v) for v in pending[a])
        order = pending[a] + [v for v in work[a] if id(v) not in todo]  # the cached ones spread as well
        slices += [(a, order[i::n]) for i in range(n)]
    return slices


def _lowered_in_cache(variant, arch):
    key = cache.lower_key(variant, arch, manifest.kernel_module(variant.op).__file__)
    return cache.has(key, "spec.json") and cache.has(key, "kernel.cu")


def _apply_event(prog, event, key, arch, params, message, shared=None):
    """One lowering event ("failed", "shared", "cached" or lowered) into ``prog``; the (key, arch) of a "shared"
    one also into the set ``shared``."""
    if event == "failed":
        prog.fail("lower", key, arch, params, message)
    elif event == "shared":
        if shared is not None:
            shared.add((key, arch))
        prog.advance("lower", shared=True)
    else:
        prog.advance("lower", cached=event == "cached")


def _drain(queue, prog, timeout, shared=None):
    """Apply the lowering processes' events to ``prog`` (see _apply_event); returns the number handled."""
    import queue as queue_mod
    n = 0
    while True:
        try:
            event, key, arch, params, message = queue.get(timeout=timeout if n == 0 else 0)
        except queue_mod.Empty:
            prog.tick()  # keep elapsed time / ETA moving while a slow variant lowers
            return n
        n += 1
        _apply_event(prog, event, key, arch, params, message, shared)


# Lowered first, and shared with the second where build_tools.archshare proves the second's lowering the same.
SHARE_FROM, SHARE_TO = "sm_90a", "sm_100a"


def _lower_parallel(work, gen, prog, jobs=None):
    """Lower {arch: [variants]} in at most max(jobs, arches) processes at a time, live progress.

    Every slice gets a fresh process, and a process lowers one arch only (docs/LOWERING.md §3: no TileLang state
    is shared between arches). With both CUDA arches to lower, sm_90a goes first in all the processes and each of
    its lowerings that build_tools.archshare proves to be sm_100a's too is written for both (§5); then sm_100a
    lowers the rest."""
    from build_tools import archshare
    if not (work.get(SHARE_FROM) and work.get(SHARE_TO) and archshare.enabled()):
        return _lower_slices(work, gen, prog, jobs)
    rest = {a: vs for a, vs in work.items() if a not in (SHARE_FROM, SHARE_TO)}
    shared = set()
    ok = _lower_slices({SHARE_FROM: work[SHARE_FROM], **rest}, gen, prog, jobs, share_with=SHARE_TO,
                       shareable={v.key for v in work[SHARE_TO]}, shared=shared)
    second = [v for v in work[SHARE_TO] if (v.key, SHARE_TO) not in shared]
    return _lower_slices({SHARE_TO: second}, gen, prog, jobs) and ok


def _lower_slices(work, gen, prog, jobs=None, share_with=None, shareable=None, shared=None):
    import multiprocessing
    if work and not any(not _lowered_in_cache(v, a) for a, vs in work.items() for v in vs):
        # all in the build cache (a rebuild): place the files here rather than start lowering processes, each of
        # which would import TileLang first; this process imports it anyway for the compile units' sources
        from build_tools import lower
        for arch, vs in work.items():
            lower.lower_all(vs, arch, gen, log=lambda *a: None,
                            report=lambda event, v, a, message: _apply_event(prog, event, v.key, a, v.as_dict(),
                                                                             message))
        return not prog.failures
    ctx = multiprocessing.get_context("fork")
    slices = _lowering_slices(work, jobs or os.cpu_count())
    limit = max(jobs or os.cpu_count() or 1, len({a for a, _ in slices}))
    queue, running = ctx.Queue(), []
    todo = list(slices)
    while todo or running:
        while todo and len(running) < limit:
            arch, vs = todo.pop(0)
            args = (vs, arch, str(gen), queue) + ((share_with, shareable) if arch == SHARE_FROM else ())
            proc = ctx.Process(target=_lower_worker, args=args, daemon=True)
            proc.start()
            running.append((proc, arch))
        _drain(queue, prog, 0.2, shared)
        for proc, arch in list(running):
            if not proc.is_alive():
                proc.join()
                running.remove((proc, arch))
                if proc.exitcode != 0:  # e.g. a segfault inside TVM
                    prog.fail("lower", f"(a lowering process for {arch})", arch, {},
                              f"lowering process died (exit code {proc.exitcode}); the variant after the last one "
                              "reported above crashed it")
    _drain(queue, prog, 0.05, shared)
    return not prog.failures


def _find_ninja():
    import shutil
    import sysconfig
    for c in (os.environ.get("NINJA"), shutil.which("ninja"), os.path.join(sysconfig.get_path("scripts"), "ninja")):
        if c and os.path.exists(c):
            return c
    sys.exit("ninja not found: pip install ninja, or set NINJA=/path/to/ninja")


def _run_ninja(gen, jobs, prog, jobs_by_output):
    env = dict(os.environ, NINJA_STATUS="[%f/%t] ")
    # -k 0: keep going, so one build reports every failing kernel, not just the first
    proc = subprocess.Popen([_find_ninja(), "-C", str(gen), f"-j{jobs}", "-k", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    unknown = lambda out: (Path(out).name, "?", {}, 1)  # noqa: E731
    other = []  # ninja's own messages (e.g. "ninja: error: ..."), for a failure that is no compile error
    failed = progress.follow_ninja(proc.stdout, prog, lambda out: jobs_by_output.get(Path(out).name) or unknown(out),
                                   other=other)
    rc = proc.wait()
    if rc and not failed:
        prog.fail("nvcc", "ninja", "-", {}, f"ninja exited with status {rc}:\n" + "\n".join(other[-20:]),
                  counted=True)


def _unit_job(unit, by_stem):
    """(key, params) a failing compile unit is reported with: its variant's, or, for several variants, the
    unit's name with every member's key (the compiler's line numbers point into the unit source, where
    "// ---- <stem>" starts each member)."""
    members = [by_stem[s] for s in unit.stems]
    if len(members) == 1:
        return members[0].key, members[0].as_dict()
    return f"{unit.name} (" + "; ".join(v.key for v in members) + ")", {}


def _fail_build(prog, nbytes=None):
    report = prog.finish(nbytes=nbytes)
    print(report, file=sys.stderr)
    sys.exit(f"build failed: {len(prog.failures)} kernel job(s) failed (details above)")


def cmd_build(args):
    """Everything without CMake: lowering in -j processes (one arch each), then ninja -jN nvcc, then package."""
    from build_tools import package
    arches, variants = _plan(args)
    unit_work = _shard(arches, variants, args.shard)
    by_stem = {v.stem: v for v in variants}
    work = {a: [by_stem[s] for u in us for s in u.stems] for a, us in unit_work.items()}
    gen = Path(args.gen_dir or Path(args.out_dir).with_name(Path(args.out_dir).name + "-gen")).resolve()
    gen.mkdir(parents=True, exist_ok=True)  # absolute: build.ninja's paths must hold after `ninja -C gen`
    total = sum(len(v) for v in work.values())
    prog = progress.Progress(total, label="build", interval=args.progress_interval)
    prog.log(f"build: {total} kernels ({len(variants)} variants, arches {','.join(arches)}"
             + (f", shard {args.shard}" if args.shard else "") + f") from {args.manifest}")
    if not _lower_parallel(work, gen, prog, args.jobs):
        prog.skip("nvcc", total)
        _fail_build(prog)
    for a, us in unit_work.items():
        units.write_sources(gen, us, a)
    names = {a: [u.name for u in us] for a, us in unit_work.items()}
    size = {(a, u.name): len(u.stems) for a, us in unit_work.items() for u in us}
    _, todo = _cubins_from_cache(gen, names)
    prog.advance("nvcc", cached=True, n=sum(size[a, n] for a, ns in names.items() for n in ns if n not in todo[a]))
    if any(todo.values()):  # (writing the rule imports tilelang for its include dirs: skip when all cached)
        _write_ninja(gen / "build.ninja", gen, todo)
        jobs_by_output = {}
        for a, us in unit_work.items():
            for u in us:
                key, params = _unit_job(u, by_stem)
                jobs_by_output[f"{u.name}.{a}.cubin"] = (key, a, params, len(u.stems))
        _run_ninja(gen, args.jobs or os.cpu_count(), prog, jobs_by_output)
    if prog.failures:
        _fail_build(prog)
    # ninja skips outputs it built before in this gen dir (its log): count them as up to date
    prog.advance("nvcc", cached=True, n=total - prog.done["nvcc"])
    _cubins_to_cache(gen, todo)
    index = package.package(gen, args.out_dir, unit_work, args.manifest, log=prog.log)
    nbytes = sum({v["cubin"]: v["bytes"] for v in index["variants"]}.values())
    prog.finish(nbytes=nbytes, cubins=len(index["variants"]))
    try:  # the Ascend targets of the manifest (docs/ASCEND.md); nothing when it names none
        ascend.build(args.manifest, args.out_dir, gen, args.arches, args.shard, args.jobs, log=print)
    except ascend.AscendError as e:
        sys.exit(f"build failed (Ascend): {e}")


def cmd_merge(args):
    """Combine shard stores into one; the same variant built twice must be byte-identical."""
    from build_tools import package
    package.merge([Path(d) for d in args.stores], Path(args.out_dir))
    try:
        ascend.merge([Path(d) for d in args.stores], Path(args.out_dir))
    except ascend.AscendError as e:
        sys.exit(f"merge (Ascend): {e}")


def cmd_ascend_wheel(args):
    """The kernelkiln-ascend wheel from a store's compiled Ascend kernels (docs/ASCEND.md)."""
    from build_tools import ascend_wheel
    try:
        path = ascend_wheel.build(Path(args.store), Path(args.out_dir))
    except ascend.AscendError as e:
        sys.exit(f"ascend-wheel: {e}")
    print(f"ascend-wheel: {path} ({path.stat().st_size / 1e6:.2f} MB)")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m build_tools", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, fn in (("plan", cmd_plan), ("lower", cmd_lower), ("package", cmd_package), ("build", cmd_build),
                     ("nvcc", cmd_nvcc), ("merge", cmd_merge), ("check-store", cmd_check_store),
                     ("ascend-wheel", cmd_ascend_wheel)):
        sp = sub.add_parser(name)
        sp.set_defaults(fn=fn)
        src = sp.add_mutually_exclusive_group()
        src.add_argument("--manifest", default=str(manifest.default_manifest_path()))
        src.add_argument("--preset", help=f"a model-family manifest from manifests/presets: {presets()}")
        sp.add_argument("--arches", default=None, help="comma-separated; default: the manifest's [build] arches")
        sp.add_argument("--progress-interval", type=float, default=None,
                        help="seconds between progress lines (default: 0.1 on a TTY, 10 in logs)")
    sub.choices["plan"].add_argument("--cmake-out", required=True)
    sub.choices["lower"].add_argument("--arch", required=True, choices=manifest.SUPPORTED_ARCHES)
    sub.choices["lower"].add_argument("--gen-dir", required=True)
    sub.choices["lower"].add_argument("--stamp")
    sub.choices["lower"].add_argument("-j", "--jobs", type=int, default=1, help="lowering processes (default 1)")
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
    sub.choices["check-store"].add_argument("--store", required=True, help="a store written by build or merge")
    sub.choices["ascend-wheel"].add_argument("--store", required=True, help="a store with compiled Ascend kernels")
    sub.choices["ascend-wheel"].add_argument("--out-dir", required=True)
    args = p.parse_args(argv)
    if args.preset:
        args.manifest = str(preset_path(args.preset))
    args.fn(args)


if __name__ == "__main__":
    main()
