"""Lower manifest variants with TileLang (no nvcc, no GPU) into .cu + .json pairs.

Never lower two arches in one process: TileLang caches TIR per argument tuple inside a
process, and device-property dependent frontends would otherwise leak one
arch's choices into the other (docs/LOWERING.md §3). A lowering may instead be shared with
another arch where build_tools.archshare proves that arch's lowering identical (§5).
"""
import contextlib
import json
import re
import time
import traceback
from pathlib import Path

from build_tools import archshare, frontend_memo, z3memo

z3memo.activate()  # before spec imports TileLang: TVM binds its Z3 references when it is loaded
archshare.activate()  # likewise: libtilelang's target predicates bind when it is loaded

from build_tools import cache, manifest, spec  # noqa: E402


def write_if_changed(path, text):
    """Keep mtimes of unchanged outputs so ninja does not rebuild their cubins."""
    path = Path(path)
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True


def lower_variant(variant, arch, share_with=None):
    """(cuda_source, spec_dict, shared) of one variant for one arch; ``shared`` is the spec of the same lowering
    for arch ``share_with`` if build_tools.archshare proved that arch's lowering identical (its CUDA is this
    one's), else None. ``lower_variant.last_trace`` keeps the last Trace (why a lowering was not shared)."""
    from tilelang import tvm
    from tilelang.backend.module import create_backend_context
    from tilelang.engine.lower import lower_with_context
    from tilelang.transform.pass_config import normalize_pass_configs
    from tvm.target import Target

    z3memo.clear()  # this variant's answers must not depend on what the process lowered before
    frontend_memo.activate()  # the rewrite of the kernel's source is reused only where provably the same
    mod = manifest.kernel_module(variant.op)
    prim = mod.build(variant.as_dict(), arch)
    target = Target({"kind": "cuda", "arch": arch})
    # The "cython" context lowers without host codegen and without device compile,
    # which keeps the host IR (TMA descriptors, argument binding) readable.
    ctx = create_backend_context(target, None, "cython")
    cfg = normalize_pass_configs(dict(mod.PASS_CONFIGS))
    trace = contextlib.nullcontext()
    if share_with is not None:
        other_prim = prim if archshare.frontend_ignores_arch(mod.build) else mod.build(variant.as_dict(), share_with)
        trace = archshare.trace(prim, other_prim, target, Target({"kind": "cuda", "arch": share_with}))
    with trace as shared_trace, tvm.transform.PassContext(opt_level=3, config=cfg), target:
        art = lower_with_context(prim, ctx, enable_host_codegen=False, enable_device_compile=False)
    lower_variant.last_trace = shared_trace
    launch = spec.extract(prim, art)
    check_contract_args(variant.op, variant.as_dict(), launch)
    launch.update({"op": variant.op, "key": variant.key, "variant": variant.as_dict(), "arch": arch})
    source, launch = unique_symbols(art.kernel_source, launch, variant.stem)
    shared = None
    if shared_trace is not None and not shared_trace.reasons:
        shared = dict(launch, arch=share_with)
    return source, launch, shared


lower_variant.last_trace = None


def check_contract_args(op, values, launch):
    """The PrimFunc's parameters, as the IR names them, must be the launch arguments the op's contract declares: the
    runtime binds its values by those names."""
    contract = manifest.CONTRACTS.get(op)
    if contract is None:
        return
    names = tuple(p["name"] for p in launch["params"] if p["kind"] != "symbol")
    declared = contract.args_for(values)
    if names != declared:
        raise spec.SpecError(f"{op}: the kernel's parameters are {list(names)}, its contract declares "
                             f"{list(declared)} (python/kernelkiln_contract)")


_DYNAMIC_SHARED = re.compile(r"extern __shared__ (?:__align__\(\d+\) )?[\w:]+ (\w+)\[\];")


def unique_symbols(source, launch, stem):
    """Suffix every kernel symbol with the variant's digest, so that the variants of one op can share a
    compile unit and a cubin (build_tools.units); the runtime takes the symbol from the spec. The dynamic
    shared memory array too: nvcc requires one type for an `extern __shared__` name across a translation
    unit, namespaces notwithstanding (uchar tile[] and uint tile[] of two variants do not compile)."""
    suffix = stem.rsplit("-", 1)[-1]
    for name in sorted(set(_DYNAMIC_SHARED.findall(source))):
        source = re.sub(rf"\b{re.escape(name)}\b", f"{name}_{suffix}", source)
    for k in launch["kernels"]:
        new = f"{k['symbol']}_{suffix}"
        source, n = re.subn(rf"\b{re.escape(k['symbol'])}\b", new, source)
        if n == 0:
            raise spec.SpecError(f"kernel symbol {k['symbol']} not found in the lowered source")
        k["symbol"] = new
    return source, launch


def lower_all(variants, arch, out_dir, log=print, report=None, share_with=None, shareable=None):
    """Lower ``variants`` for ``arch`` into ``out_dir``; returns [(variant, exception)] of failures.

    ``report(event, variant, arch, message)``, if given, is called once per variant with event
    "cached", "lowered" or "failed" (message: the lowering traceback) -- build_tools.progress -- and once more
    with "shared" and arch ``share_with`` for each lowering that was proved to be that arch's too (its files and
    cache entry are written as well; the caller leaves those variants out of that arch's lowering). ``shareable``:
    the keys of the variants to try that for (None: all)."""
    report = report or (lambda *a: None)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    failures, hits = [], 0
    for i, v in enumerate(variants):
        t0 = time.time()
        key = cache.lower_key(v, arch, manifest.kernel_module(v.op).__file__)
        src, launch_json = cache.get(key, "kernel.cu"), cache.get(key, "spec.json")
        if src is not None and launch_json is not None:
            src, launch_json = src.decode(), launch_json.decode()
            try:  # the contract may have changed since the cached lowering: check its names again
                check_contract_args(v.op, v.as_dict(), json.loads(launch_json))
            except spec.SpecError as e:
                failures.append((v, e))
                log(f"[{arch}] FAILED {v.key}: {e}")
                report("failed", v, arch, str(e))
                continue
            hits += 1
            report("cached", v, arch, None)
        else:
            try:
                try_share = share_with if shareable is None or v.key in shareable else None
                src, launch, shared = lower_variant(v, arch, try_share)
            except Exception as e:  # report every failing variant with the spec that produced it
                failures.append((v, e))
                log(f"[{arch}] FAILED {v.key}: {type(e).__name__}: {e}")
                report("failed", v, arch, traceback.format_exc())
                continue
            launch_json = json.dumps(launch, indent=1, sort_keys=True)
            cache.put(key, "kernel.cu", src)
            cache.put(key, "spec.json", launch_json)
            log(f"[{arch}] {i + 1}/{len(variants)} lowered {v.key} in {time.time() - t0:.2f}s")
            trace = getattr(lower_variant, "last_trace", None)  # (a stand-in lower_variant may not keep one)
            if try_share is not None and shared is None and trace is not None:
                log(f"[{arch}] {v.key} not shared with {try_share}: {'; '.join(trace.reasons)}")
            report("lowered", v, arch, None)
            if shared is not None:
                shared_json = json.dumps(shared, indent=1, sort_keys=True)
                other_key = cache.lower_key(v, share_with, manifest.kernel_module(v.op).__file__)
                cache.put(other_key, "kernel.cu", src)
                cache.put(other_key, "spec.json", shared_json)
                write_if_changed(out_dir / f"{v.stem}.{share_with}.cu", src)
                write_if_changed(out_dir / f"{v.stem}.{share_with}.json", shared_json)
                report("shared", v, share_with, None)
        write_if_changed(out_dir / f"{v.stem}.{arch}.cu", src)
        write_if_changed(out_dir / f"{v.stem}.{arch}.json", launch_json)
    if hits:
        log(f"[{arch}] {hits}/{len(variants)} taken from the build cache")
    return failures
