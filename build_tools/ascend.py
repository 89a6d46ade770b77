"""The Ascend build (docs/ASCEND.md): manifest ``[[ascend.<op>]]`` tables -> AscendC (TileLang's Ascend lowering, no
CANN needed) -> launch spec from the IR -> bisheng + CCE ld.lld where the CANN toolkit is found -> ELF checks ->
``<store>/ascend/``.

    [build]
    arches = ["sm_90a", "sm_100a"]
    ascend = ["dav-3510"]        # Ascend targets: lowered on any machine, compiled where bisheng is found

    [[ascend.topk_gate]]         # the compile-time values of the op's Ascend declaration (CONTRACT.ascend)
    num_vregs = [1, 2, 4]

``python -m build_tools build`` runs this after the CUDA part (``--arches`` takes Ascend targets too: ``--arches
dav-3510`` builds only them, ``--arches sm_90a`` none of them); ``merge`` and ``check-store`` handle ``ascend/``.
Lowered sources, launch specs and binaries go through the content-addressed cache (build_tools/cache.py). Without
``bisheng`` the build says so in one line and the store gets no Ascend binaries: never a source to compile at run
time.
"""
import concurrent.futures
import functools
import hashlib
import importlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import traceback
from pathlib import Path

from build_tools import cache, elf, manifest
from build_tools.toolchain import canonical_lock

TARGETS = ("dav-3510",)  # bisheng --npu-arch values (Ascend 950)
STORE_DIR = "ascend"
FORMAT = 1
# Unified Buffer bytes a kernel may use: 248 KiB, 216 KiB where it runs SIMT regions (which reserve the rest).
UB_BYTES = {"dav-3510": 248 * 1024}
UB_BYTES_SIMT = {"dav-3510": 216 * 1024}
MAX_BINARY_BYTES = 16 << 20
# The device compile of tilelang's own Ascend backend (tilelang/contrib/bisheng.py), for one target.
BISHENG_FLAGS = ("-O2", "-fPIC", "-std=c++20", "-mllvm", "-cce-aicore-dcpreload-args=false")
LINK_FLAGS = ("-m", "aicorelinux", "-Ttext", "0", "--no-mmap-output-file")
# Every compile reads its source from one fixed path (as the CUDA build: build_tools/toolchain.py), so the bytes do
# not depend on the build directory.
CANONICAL_SOURCE_ROOT = Path("/tmp/kernelkiln-bisheng")
# host argument buffer layout of aclrtLaunchKernelWithHostArgs (tilelang's src/ascend/runtime/ascend_module.cc)
ARG_BYTES = {"ptr": 8, "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8}
ARGS_ALIGN = 8
C_TYPES = {"float32": "float", "bfloat16": "bfloat16_t", "float16": "half", "int64": "int64_t", "int32": "int32_t",
           "uint32": "uint32_t", "uint8": "uint8_t", "int8": "int8_t", "uint16": "uint16_t", "int16": "int16_t",
           "float64": "double", "uint64": "uint64_t"}
_OWN = Path(__file__).read_bytes()  # this file enters every Ascend cache key


class AscendError(RuntimeError):
    pass


class LaunchSpecError(AscendError):
    """A lowered Ascend kernel the launch spec cannot describe, or whose parameters are not its contract's."""


def _names_in(expr_text):
    import ast
    return {n.id for n in ast.walk(ast.parse(expr_text, mode="eval")) if isinstance(n, ast.Name)}


# ------------------------------------------------------------------------------------------------ manifest


def contract(op):
    """The Ascend declaration of ``op`` (an OpContract), or a ManifestError naming the ops that have one."""
    c = manifest.CONTRACTS.get(op)
    if c is None or c.ascend is None:
        have = sorted(o for o, k in manifest.CONTRACTS.items() if k.ascend is not None)
        raise manifest.ManifestError(f"op {op!r} has no Ascend kernel; ops with one: {have}")
    return c.ascend


def ops_with_kernels():
    return sorted(o for o, c in manifest.CONTRACTS.items() if c.ascend is not None)


def load(path):
    """(Ascend targets, Ascend variants) of a manifest: ``[build] ascend`` and its ``[[ascend.<op>]]`` tables."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    targets = list(data.get("build", {}).get("ascend", []))
    bad = [t for t in targets if t not in TARGETS]
    if bad:
        raise manifest.ManifestError(f"{path}: unsupported Ascend targets {bad}; supported: {list(TARGETS)}")
    tables = data.get("ascend", {})
    if tables and not targets:
        raise manifest.ManifestError(f"{path}: [[ascend.<op>]] tables need [build] ascend = [...targets]")
    variants = []
    for op, op_tables in tables.items():
        variants.extend(expand(op, op_tables, source=str(path)))
    seen, out = set(), []
    for v in variants:
        if v.key not in seen:
            seen.add(v.key)
            out.append(v)
    return targets, out


def expand(op, tables, source="<manifest>"):
    """The cartesian product of each table over the op's Ascend parameters, minus what its constraints reject."""
    c = contract(op)
    names = c.param_names
    out = []
    for table in tables:
        table = {**c.defaults, **table}
        missing = [n for n in names if n not in table]
        extra = [n for n in table if n not in names]
        if missing or extra:
            raise manifest.ManifestError(f"{source}: [[ascend.{op}]] must give exactly {list(names)}; "
                                         f"missing {missing}, unknown {extra}")
        lists = [table[n] if isinstance(table[n], list) else [table[n]] for n in names]
        for combo in itertools.product(*lists):
            params = dict(zip(names, combo))
            reason = c.invalid_reason(params)
            if reason is None:
                out.append(manifest.Variant(op, tuple(params.items())))
            elif any(p.problem(params[p.name]) for p in c.params):  # a value no Ascend kernel offers: say so
                raise manifest.ManifestError(f"{source}: [[ascend.{op}]]: {reason}")
    return out


def requested_targets(manifest_targets, arches_arg):
    """The manifest's Ascend targets narrowed by ``--arches`` (which may name CUDA arches and Ascend targets)."""
    if not arches_arg:
        return list(manifest_targets)
    asked = arches_arg.split(",")
    return [t for t in manifest_targets if t in asked]


def shard(targets, variants, spec_text):
    """{target: [variants]} of shard ``i/n``: the sorted (target, stem) jobs, every n-th from the i-th."""
    i, n = (int(x) for x in spec_text.split("/")) if spec_text else (0, 1)
    jobs = sorted(((t, v) for t in targets for v in variants), key=lambda j: (j[0], j[1].stem))
    work = {t: [] for t in targets}
    for k, (t, v) in enumerate(jobs):
        if k % n == i:
            work[t].append(v)
    return work


# ------------------------------------------------------------------------------------------------ lowering


def kernel_module(op):
    return importlib.import_module(contract(op).kernel)


def lower_key(variant, target):
    base = cache.lower_key(variant, target, kernel_module(variant.op).__file__)
    return hashlib.sha256(f"ascend:{FORMAT}:{base}:".encode() + _OWN).hexdigest()


def _spec():
    """build_tools.spec (it imports tilelang: only the lowering needs it, never merge or check-store)."""
    from build_tools import spec
    return spec


def lower_variant(variant, target):
    """(AscendC source, launch spec) of one variant for one target."""
    from tilelang import tvm
    from tilelang.backend.module import create_backend_context
    from tilelang.engine.lower import lower_with_context
    from tilelang.transform.pass_config import normalize_pass_configs
    from tvm.target import Target

    mod = kernel_module(variant.op)
    prim = mod.build(variant.as_dict(), target)
    tgt = Target({"kind": "ascend"})
    ctx = create_backend_context(tgt, None, "cython")
    cfg = normalize_pass_configs(dict(getattr(mod, "PASS_CONFIGS", {})))
    with tvm.transform.PassContext(opt_level=3, config=cfg), tgt:
        art = lower_with_context(prim, ctx, enable_host_codegen=False, enable_device_compile=False)
    launch = ascend_spec(_spec().extract(prim, art), art.kernel_source, getattr(mod, "WORK_ITEMS", None), target)
    check_contract_args(variant.op, launch)
    launch.update({"op": variant.op, "key": variant.key, "variant": variant.as_dict(), "arch": target})
    return unique_symbols(art.kernel_source, launch, variant.stem)


def ascend_spec(cuda_style, source, work_items, target):
    """The Ascend launch spec (docs/ASCEND.md "Store format") from the extractor's CUDA-style one: argument
    offsets in the host argument buffer, the block dim (the 1-D core grid), the UB bytes."""
    if cuda_style["tensormaps"]:
        raise LaunchSpecError("Ascend kernels have no TMA descriptors")
    if work_items is None:
        raise LaunchSpecError("the Ascend kernel module must define WORK_ITEMS (an expression over its parameters)")
    params = cuda_style["params"]
    names = {p["name"] for p in params}
    unknown = _names_in(work_items) - names
    if unknown:
        raise LaunchSpecError(f"WORK_ITEMS {work_items!r} names {sorted(unknown)}, which are not parameters")
    kernels = []
    simt = "__simt_vf__" in source
    for k in cuda_style["kernels"]:
        if k["block"] != [1, 1, 1] or k["grid"][1:] != [1, 1]:
            raise LaunchSpecError(f"{k['symbol']}: an Ascend launch is a 1-D core grid, got grid {k['grid']} "
                                 f"block {k['block']}")
        if not re.search(rf'extern "C" __global__ __vector__ void {re.escape(k["symbol"])}\(', source):
            raise LaunchSpecError(f"{k['symbol']}: not an AI Vector core entry (extern \"C\" __global__ __vector__)")
        args, offset = [], 0
        for a in k["args"]:
            kind = a["kind"]
            if kind == "ptr":
                size, entry = 8, {"kind": "ptr", "param": a["param"], "dtype": params[a["param"]]["dtype"]}
            elif kind == "scalar":
                size, entry = ARG_BYTES[a["ctype"]], {"kind": "scalar", "param": a["param"], "ctype": a["ctype"]}
            else:
                raise LaunchSpecError(f"{k['symbol']}: argument kind {kind!r} has no Ascend launch")
            offset = -(-offset // max(size, 4)) * max(size, 4)
            entry.update(offset=offset, size=size)
            offset += size
            args.append(entry)
        ub = k["dyn_smem_bytes"]
        limit = (UB_BYTES_SIMT if simt else UB_BYTES)[target]
        if ub > limit:
            raise LaunchSpecError(f"{k['symbol']}: {ub} bytes of Unified Buffer, over the {limit} of {target}")
        kernels.append({"symbol": k["symbol"], "args": args, "args_bytes": -(-offset // ARGS_ALIGN) * ARGS_ALIGN,
                        "block_dim": str(k["grid"][0]), "work_items": work_items, "core_type": "vector",
                        "dyn_ubuf_bytes": ub})
    return {"spec_version": cuda_style["spec_version"], "backend": "ascend", "params": params, "kernels": kernels}


def check_contract_args(op, launch):
    """The PrimFunc's parameters (buffers, scalars and buffer-shape symbols, in spec order) must be the op's Ascend
    ``args``: the runtime binds every value by these names."""
    names = tuple(p["name"] for p in launch["params"])
    declared = contract(op).args_for({})
    if names != declared:
        raise LaunchSpecError(f"{op} (Ascend): the kernel's parameters are {list(names)}, its contract declares "
                             f"{list(declared)} (python/kernelkiln_contract, CONTRACT.ascend)")


def unique_symbols(source, launch, stem):
    """Suffix each entry symbol (and its VF helpers, which carry its name) with the variant's digest."""
    suffix = stem.rsplit("-", 1)[-1]
    for k in launch["kernels"]:
        new = f"{k['symbol']}_{suffix}"
        source, n = re.subn(rf"\b{re.escape(k['symbol'])}(?=\b|_sim[dt]_vf_)", new, source)
        if n == 0:
            raise LaunchSpecError(f"kernel symbol {k['symbol']} not found in the lowered source")
        k["symbol"] = new
    return source, launch


def entry_signature(source, symbol):
    """[(C type, name)] of the entry's parameters, read from the AscendC source."""
    m = re.search(rf'extern "C" __global__ __vector__ void {re.escape(symbol)}\(([^)]*)\)', source)
    if m is None:
        raise AscendError(f"no entry {symbol} in the source")
    out = []
    for part in (p.strip() for p in m.group(1).split(",") if p.strip()):
        typ, name = part.rsplit(None, 1)
        while name.startswith("*"):
            typ, name = typ + "*", name[1:]
        out.append((" ".join(typ.replace("*", " *").split()), name))
    return out


def expected_signature(launch_kernel, params):
    """The entry parameters the launch spec describes: [(C type, name)] (pointers as ``__gm__ T *``)."""
    out = []
    for a in launch_kernel["args"]:
        p = params[a["param"]]
        if a["kind"] == "ptr":
            out.append((f"__gm__ {C_TYPES[a['dtype']]} *", None))
        else:
            out.append((C_TYPES[a["ctype"]], p["name"]))
    return out


def lower_all(variants, target, gen_dir, report=None):
    """Lower ``variants`` for ``target`` into ``gen_dir`` (``<stem>.<target>.asc`` + ``.json``) through the cache;
    returns the failures [(key, traceback)]. ``report(event, key)``: "cached" / "lowered" / "failed"."""
    from build_tools.lower import write_if_changed
    report = report or (lambda *a: None)
    gen_dir = Path(gen_dir)
    gen_dir.mkdir(parents=True, exist_ok=True)
    failures = []
    for v in variants:
        key = lower_key(v, target)
        src, launch_json = cache.get(key, "kernel.asc"), cache.get(key, "spec.json")
        if src is not None and launch_json is not None:
            src, launch_json = src.decode(), launch_json.decode()
            try:
                check_contract_args(v.op, json.loads(launch_json))
            except LaunchSpecError as e:
                failures.append((v.key, str(e)))
                report("failed", v.key)
                continue
            report("cached", v.key)
        else:
            try:
                src, launch = lower_variant(v, target)
            except Exception:
                failures.append((v.key, traceback.format_exc()))
                report("failed", v.key)
                continue
            launch_json = json.dumps(launch, indent=1, sort_keys=True)
            cache.put(key, "kernel.asc", src)
            cache.put(key, "spec.json", launch_json)
            report("lowered", v.key)
        write_if_changed(gen_dir / f"{v.stem}.{target}.asc", src)
        write_if_changed(gen_dir / f"{v.stem}.{target}.json", launch_json)
    return failures


def _lower_worker(items, gen_dir):
    """One lowering process: [(target, variant)] -> failures (TileLang state stays in the worker)."""
    failures = []
    for target, group in itertools.groupby(items, key=lambda j: j[0]):
        failures += lower_all([v for _, v in group], target, gen_dir)
    return failures


def lower_parallel(work, gen_dir, jobs):
    """Lower {target: [variants]} in up to ``jobs`` worker processes (round-robin slices; the output does not depend
    on the split). Returns the failures."""
    items = [(t, v) for t, vs in sorted(work.items()) for v in vs]
    if not items:
        return []
    n = max(1, min(jobs or 1, len(items)))
    slices = [items[i::n] for i in range(n)]
    failures = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=n) as pool:
        for f in [pool.submit(_lower_worker, s, str(gen_dir)) for s in slices]:
            try:
                failures += f.result()
            except Exception as e:  # a crashed worker (e.g. a segfault inside TVM)
                failures.append(("(an Ascend lowering process)", f"lowering process died: {e!r}"))
    return failures


# ------------------------------------------------------------------------------------------------ toolchain


def _file(p):
    return p if p and os.path.isfile(p) and os.access(p, os.X_OK) else None


def _cann_roots():
    return [os.environ[k] for k in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME") if os.environ.get(k)]


def find_bisheng():
    """bisheng from $BISHENG_HOME/bin, the CANN toolkit ($ASCEND_HOME_PATH / $ASCEND_TOOLKIT_HOME: bin/ or
    compiler/ccec_compiler/bin/), then PATH; None if there is none."""
    candidates = [os.path.join(os.environ["BISHENG_HOME"], "bin", "bisheng")] if os.environ.get("BISHENG_HOME") else []
    for root in _cann_roots():
        candidates += [os.path.join(root, "bin", "bisheng"), os.path.join(root, "compiler", "ccec_compiler", "bin",
                                                                             "bisheng")]
    candidates.append(shutil.which("bisheng"))
    return next((c for c in candidates if _file(c)), None)


def find_ld_lld(bisheng):
    """The CCE-capable ld.lld: next to bisheng, in $BISHENG_HOME/bin or the CANN toolkit, else PATH's."""
    candidates = [os.path.join(os.path.dirname(bisheng), "ld.lld")]
    if os.environ.get("BISHENG_HOME"):
        candidates.append(os.path.join(os.environ["BISHENG_HOME"], "bin", "ld.lld"))
    for root in _cann_roots():
        candidates += [os.path.join(root, "bin", "ld.lld"), os.path.join(root, "compiler", "ccec_compiler", "bin",
                                                                            "ld.lld")]
    candidates.append(shutil.which("ld.lld"))
    found = next((c for c in candidates if _file(c)), None)
    if found is None:
        raise AscendError(f"bisheng found at {bisheng}, but no ld.lld next to it, in BISHENG_HOME, the CANN toolkit "
                          "(ASCEND_HOME_PATH) or PATH")
    return found


@functools.cache
def bisheng_version(bisheng):
    r = subprocess.run([bisheng, "--version"], capture_output=True, text=True)
    lines = (r.stdout or r.stderr).strip().splitlines()
    return lines[0].strip() if lines else "unknown"


NOT_FOUND = ("bisheng not found (looked in $BISHENG_HOME/bin, $ASCEND_HOME_PATH and $ASCEND_TOOLKIT_HOME, PATH)")


def include_flags():
    from tilelang.env import TILELANG_TEMPLATE_PATH
    return [f"-I{TILELANG_TEMPLATE_PATH}"]


def compile_commands(source, rel_object, binary, target, bisheng, ld_lld, includes):
    """The two commands of one kernel binary: bisheng (device only) to a relocatable object, CCE ld.lld to the
    executable ELF that aclrtBinaryLoadFromData takes."""
    return ([bisheng, *BISHENG_FLAGS, f"--npu-arch={target}", "--cce-aicore-only", *includes, str(source), "-o",
             str(rel_object)],
            [ld_lld, *LINK_FLAGS, str(rel_object), "-o", str(binary)])


def binary_key(source_text, target, version):
    h = hashlib.sha256(f"aibin:{FORMAT}:{target}:{version}:{' '.join(BISHENG_FLAGS)}:{' '.join(LINK_FLAGS)}:"
                       f"{CANONICAL_SOURCE_ROOT}:".encode())
    h.update(manifest_tilelang_version().encode())  # the included templates
    h.update(source_text.encode())
    return h.hexdigest()


def manifest_tilelang_version():
    import importlib.metadata
    return importlib.metadata.version("tilelang")


def compile_one(stem, target, gen_dir, bisheng, ld_lld, includes):
    """Compile and link ``<stem>.<target>.asc`` of gen_dir into ``<stem>.<target>.aibin`` (cached)."""
    gen_dir = Path(gen_dir)
    src = gen_dir / f"{stem}.{target}.asc"
    out = gen_dir / f"{stem}.{target}.aibin"
    text = src.read_text()
    key = binary_key(text, target, bisheng_version(bisheng))
    data = cache.get(key, "kernel.aibin")
    if data is None:
        with canonical_lock(CANONICAL_SOURCE_ROOT / f"{stem}.{target}") as d:  # as the nvcc path: one per build
            canonical = d / "kernel.asc"
            tmp = d / f"kernel.asc.{os.getpid()}.tmp"
            tmp.write_text(text)
            os.replace(tmp, canonical)
            rel = d / f"kernel.{os.getpid()}.rel.o"
            for cmd in compile_commands(canonical, rel, out, target, bisheng, ld_lld, includes):
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode:
                    raise AscendError(f"{' '.join(map(str, cmd))}\nexited with {r.returncode}:\n{r.stdout}{r.stderr}")
            rel.unlink(missing_ok=True)
        data = out.read_bytes()
        cache.put(key, "kernel.aibin", data)
    elif not out.exists() or out.read_bytes() != data:
        out.write_bytes(data)
    return data


def check_binary(data, launch, name):
    """Problems of one kernel binary against its launch spec (an empty list: fine) and its section sizes."""
    problems = []
    try:
        image = elf.parse(data)
    except elf.ElfError as e:
        return [f"{name}: {e}"], {}
    if image.type != 2:
        problems.append(f"{name}: ELF type {image.type}, expected an executable (2): was it linked?")
    for k in launch["kernels"]:
        if not image.defined(k["symbol"]):
            problems.append(f"{name}: entry symbol {k['symbol']} is not defined")
    text = image.sections.get(".text", 0)
    if text == 0:
        problems.append(f"{name}: empty .text")
    if not 0 < len(data) <= MAX_BINARY_BYTES:
        problems.append(f"{name}: {len(data)} bytes, outside (0, {MAX_BINARY_BYTES}]")
    sections = {s: image.sections[s] for s in (".text", ".data", ".rodata", ".bss") if s in image.sections}
    return problems, sections


# ------------------------------------------------------------------------------------------------ store


def _version():
    import re as _re
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    m = _re.search(r'^version\s*=\s*"([^"]+)"', text, _re.M)
    return m.group(1) if m else "unknown"


def package(gen_dir, out_dir, work, manifest_path, requested, compiled, toolchain, reason=None):
    """Write ``<out_dir>/ascend/``: the binaries of ``compiled`` ({(target, stem): (bytes, sections)}) with their
    runtime entries, and the build record (every lowered variant of ``work``)."""
    gen_dir, folder = Path(gen_dir), Path(out_dir) / STORE_DIR
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    variants, lowered = [], []
    for target, vs in sorted(work.items()):
        for v in vs:
            src = (gen_dir / f"{v.stem}.{target}.asc").read_bytes()
            launch = json.loads((gen_dir / f"{v.stem}.{target}.json").read_text())
            lowered.append({"op": v.op, "key": v.key, "arch": target, "stem": v.stem,
                            "source_sha256": hashlib.sha256(src).hexdigest()})
            if (target, v.stem) not in compiled:
                continue
            data, sections = compiled[target, v.stem]
            name = f"{v.stem}.{target}.aibin"
            (folder / name).write_bytes(data)
            variants.append({"op": v.op, "key": v.key, "variant": launch["variant"], "arch": target, "binary": name,
                             "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                             "spec": {k: launch[k] for k in ("spec_version", "backend", "params", "kernels")},
                             "source_sha256": hashlib.sha256(src).hexdigest(), "sections": sections})
    index = {"format": FORMAT, "backend": "ascend", "status": "built" if compiled else "not-compiled",
             "requested_arches": sorted(requested), "toolchain": toolchain, "kernelkiln": _version(),
             "manifest_sha256": hashlib.sha256(Path(manifest_path).read_bytes()).hexdigest(),
             "variants": variants, "lowered": lowered}
    if reason:
        index["reason"] = reason
    write_index(folder, index)
    return index


def write_index(folder, index):
    index["variants"].sort(key=lambda v: (v["op"], v["arch"], v["key"]))
    index["lowered"].sort(key=lambda v: (v["op"], v["arch"], v["key"]))
    index["arches"] = sorted({v["arch"] for v in index["variants"]})
    (folder / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True))
    runtime = folder / "runtime"
    if runtime.exists():
        shutil.rmtree(runtime)
    runtime.mkdir()
    groups = {}
    for v in index["variants"]:
        entry = {k: v[k] for k in ("op", "key", "variant", "arch", "binary", "sha256", "bytes", "spec")}
        groups.setdefault((v["op"], v["arch"]), []).append(entry)
    for (op, target), entries in sorted(groups.items()):
        (runtime / f"{op}.{target}.json").write_text(json.dumps(entries, separators=(",", ":"), sort_keys=True))
    summary = {k: index[k] for k in ("format", "backend", "status", "arches", "toolchain", "kernelkiln")}
    summary["ops"] = sorted({op for op, _ in groups})
    if index.get("reason"):
        summary["reason"] = index["reason"]
    (runtime / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))


def merge(stores, out_dir, log=print):
    """Merge the ``ascend/`` parts of shard stores into ``out_dir/ascend`` (same toolchain, status and manifest; a
    variant in two shards must have the same bytes). Stores without one are skipped; None if none has one."""
    parts = [Path(s) / STORE_DIR for s in stores if (Path(s) / STORE_DIR / "index.json").is_file()]
    if not parts:
        return None
    indexes = [json.loads((p / "index.json").read_text()) for p in parts]
    for field in ("format", "toolchain", "status", "manifest_sha256", "requested_arches", "kernelkiln"):
        values = {json.dumps(ix.get(field), sort_keys=True) for ix in indexes}
        if len(values) > 1:
            raise AscendError(f"cannot merge Ascend stores built with different {field}: {sorted(values)}")
    folder = Path(out_dir) / STORE_DIR
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    merged, lowered = {}, {}
    for p, ix in zip(parts, indexes):
        for v in ix["variants"]:
            data = (p / v["binary"]).read_bytes()
            if hashlib.sha256(data).hexdigest() != v["sha256"]:
                raise AscendError(f"{p / v['binary']}: contents do not match its index entry")
            ident = (v["op"], v["arch"], v["key"])
            if ident in merged and merged[ident]["sha256"] != v["sha256"]:
                raise AscendError(f"conflict: {v['key']} [{v['arch']}] differs between shards")
            merged[ident] = v
            (folder / v["binary"]).write_bytes(data)
        for v in ix["lowered"]:
            ident = (v["op"], v["arch"], v["key"])
            if ident in lowered and lowered[ident]["source_sha256"] != v["source_sha256"]:
                raise AscendError(f"conflict: the AscendC source of {v['key']} [{v['arch']}] differs between shards")
            lowered[ident] = v
    index = dict(indexes[0], variants=list(merged.values()), lowered=list(lowered.values()))
    write_index(folder, index)
    log(f"merged {len(parts)} Ascend stores: {len(merged)} kernels ({index['status']}) into {folder}")
    return index


def check_store(store):
    """Verify ``<store>/ascend`` if there is one: format, every binary with its indexed size and sha256, and the
    runtime entries equal to the index's. Returns the index or None."""
    folder = Path(store) / STORE_DIR
    path = folder / "index.json"
    if not path.is_file():
        return None
    index = json.loads(path.read_text())
    if index.get("format") != FORMAT or index.get("backend") != "ascend":
        raise AscendError(f"{path}: not a format-{FORMAT} Ascend index")
    for v in index["variants"]:
        f = folder / v["binary"]
        if not f.is_file():
            raise AscendError(f"{store}: {STORE_DIR}/{v['binary']} ({v['key']} [{v['arch']}]) is missing")
        data = f.read_bytes()
        if len(data) != v["bytes"] or hashlib.sha256(data).hexdigest() != v["sha256"]:
            raise AscendError(f"{f}: contents do not match its index entry")
    for entry_file in (folder / "runtime").glob("*.*.json"):
        for e in json.loads(entry_file.read_text()):
            match = [v for v in index["variants"] if (v["op"], v["arch"], v["key"]) == (e["op"], e["arch"], e["key"])]
            if not match or match[0]["sha256"] != e["sha256"]:
                raise AscendError(f"{entry_file}: entry {e['key']} does not match index.json")
    return index


# ------------------------------------------------------------------------------------------------ the build step


def build(manifest_path, out_dir, gen_dir, arches_arg=None, shard_spec=None, jobs=None, log=print):
    """The Ascend part of ``python -m build_tools build``; None when the manifest (or ``--arches``) asks for no
    Ascend target. Fails (AscendError) on a lowering, compile or check failure."""
    targets, variants = load(manifest_path)
    requested = requested_targets(targets, arches_arg)
    if not requested or not variants:
        return None
    work = shard(requested, variants, shard_spec)
    total = sum(len(v) for v in work.values())
    failures = lower_parallel(work, gen_dir, jobs)
    if failures:
        raise AscendError(f"{len(failures)} Ascend lowering(s) failed:\n" +
                          "\n".join(f"--- {key}\n{tb}" for key, tb in failures))
    toolchain = {"tilelang": manifest_tilelang_version(), "bisheng": None}
    bisheng = find_bisheng()
    if bisheng is None:
        log(f"ascend: {NOT_FOUND}: {total} Ascend kernels lowered to AscendC (in {gen_dir}), no Ascend binaries "
            "built or shipped")
        return package(gen_dir, out_dir, work, manifest_path, requested, {}, toolchain, reason="bisheng not found")
    ld_lld = find_ld_lld(bisheng)
    toolchain["bisheng"] = bisheng_version(bisheng)
    includes = include_flags()
    compiled, problems = {}, []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1)) as pool:
        futures = {pool.submit(compile_one, v.stem, t, gen_dir, bisheng, ld_lld, includes): (t, v)
                   for t, vs in work.items() for v in vs}
        for f, (t, v) in futures.items():
            try:
                data = f.result()
            except AscendError as e:
                problems.append(f"{v.key} [{t}]: compile failed: {e}")
                continue
            launch = json.loads((Path(gen_dir) / f"{v.stem}.{t}.json").read_text())
            found, sections = check_binary(data, launch, f"{v.stem}.{t}.aibin")
            problems += [f"{v.key} [{t}]: {p}" for p in found]
            if not found:
                compiled[t, v.stem] = (data, sections)
    if problems:
        raise AscendError("Ascend kernel binaries failed:\n  " + "\n  ".join(problems))
    log(f"ascend: {len(compiled)} kernels compiled with {bisheng} ({toolchain['bisheng']}) and checked")
    return package(gen_dir, out_dir, work, manifest_path, requested, compiled, toolchain)


def main(argv=None):  # pragma: no cover - a debugging aid: lower one manifest's Ascend variants, print the specs
    import argparse
    p = argparse.ArgumentParser(prog="python -m build_tools.ascend")
    p.add_argument("--manifest", default=str(manifest.default_manifest_path()))
    p.add_argument("--gen-dir", required=True)
    args = p.parse_args(argv)
    targets, variants = load(args.manifest)
    failures = lower_all(variants, targets[0], args.gen_dir, report=lambda e, k: print(e, k))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
