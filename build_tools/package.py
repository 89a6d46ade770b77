"""Check every cubin against its launch spec and write the kernel store (cubins + index.json)."""
import hashlib
import json
import shutil
from pathlib import Path

from build_tools import cubin_check, toolchain

PARAM_BYTES = {"ptr": 8, "tensormap": 128, "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8,
               "float64": 8}
# Largest static + dynamic shared memory per block (opt-in), per arch.
MAX_SHARED_BYTES = {"sm_90a": 232448, "sm_100a": 232448}


class PackageError(RuntimeError):
    pass


def _param_sizes(kernel):
    return [PARAM_BYTES["ptr" if a["kind"] == "ptr" else a["kind"] if a["kind"] == "tensormap" else a["ctype"]]
            for a in kernel["args"]]


def _inspect(cubin, cuobjdump):
    """cubin_check.inspect_cubin, remembered in the build cache by the cubin's bytes, the cuobjdump that read it
    and the parser's source (a rebuild that changed nothing spent most of its time in cuobjdump)."""
    from build_tools import cache
    h = hashlib.sha256(b"inspect:" + Path(cubin_check.__file__).read_bytes() + str(cuobjdump).encode()
                       + toolchain.nvcc_version().encode() + b"\0" + Path(cubin).read_bytes())
    key = h.hexdigest()
    known = cache.get(key, "info.json")
    if known is not None:
        info = cubin_check.CubinInfo.from_dict(json.loads(known))
        info.path = str(cubin)
        return info
    info = cubin_check.inspect_cubin(cubin, cuobjdump=cuobjdump)
    cache.put(key, "info.json", json.dumps(info.to_dict()))
    return info


def package(gen_dir, out_dir, units_by_arch, manifest_path, log=print):
    """Check each compile unit's cubin against the launch specs of all its members (build_tools.units)
    and write the store: the unit cubins and one index entry per (variant, arch), naming its cubin."""
    gen_dir, out_dir = Path(gen_dir), Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    cuobjdump = cubin_check.find_cuobjdump()
    variants, problems = [], []
    for arch, units in sorted(units_by_arch.items()):
        for unit in units:
            specs = [json.loads((gen_dir / f"{stem}.{arch}.json").read_text()) for stem in unit.stems]
            name = f"{unit.name}.{arch}.cubin"
            cubin = gen_dir / name
            expected = [{"symbol": k["symbol"], "param_sizes": _param_sizes(k), "dyn_smem_bytes": k["dyn_smem_bytes"],
                         "max_shared_bytes": MAX_SHARED_BYTES[arch]} for spec in specs for k in spec["kernels"]]
            try:  # one inspection serves the check and the index's resource figures
                info = _inspect(cubin, cuobjdump) if cubin.is_file() else None
            except cubin_check.CubinInspectError as e:
                info, found = None, [f"{name}: cannot inspect cubin: {e}"]
            else:
                found = cubin_check.check_cubin(cubin, arch, expected, cuobjdump=cuobjdump, info=info)
            # a problem names a kernel symbol: report it with that variant's key (else with the unit's members)
            key_of = {k["symbol"]: spec["key"] for spec in specs for k in spec["kernels"]}
            members = "; ".join(spec["key"] for spec in specs)
            problems += [f"{next((key for sym, key in key_of.items() if repr(sym) in p), members)} [{arch}]: {p}"
                         for p in found]
            if found:
                continue
            image = cubin.read_bytes()
            (out_dir / name).write_bytes(image)
            digest = hashlib.sha256(image).hexdigest()
            for spec in specs:
                symbols = [k["symbol"] for k in spec["kernels"]]
                variants.append({
                    "op": spec["op"], "key": spec["key"], "variant": spec["variant"], "arch": arch, "cubin": name,
                    "sha256": digest, "bytes": len(image),
                    "spec": {k: spec[k] for k in ("spec_version", "params", "tensormaps", "kernels")},
                    "resources": {sym: {"registers": info.kernels[sym].registers,
                                        "stack_bytes": info.kernels[sym].stack_bytes,
                                        "static_shared_bytes": info.kernels[sym].static_shared_bytes}
                                  for sym in symbols},
                })
    if problems:
        raise PackageError("cubin checks failed:\n  " + "\n  ".join(problems))
    index = {
        "format": 1,
        "arches": sorted(units_by_arch),
        "toolchain": {"tilelang": toolchain.tilelang_version(), "nvcc": toolchain.nvcc_version()},
        "manifest_sha256": hashlib.sha256(Path(manifest_path).read_bytes()).hexdigest(),
        "variants": variants,
    }
    _write_index(out_dir, index)
    cubins = {v["cubin"]: v["bytes"] for v in variants}
    log(f"packaged {len(variants)} kernels in {len(cubins)} cubins ({sum(cubins.values()) / 1e6:.2f} MB) into {out_dir}")
    return index


def preset_coverage(variants):
    """{preset: {"arches": [...], "missing": n}} for manifests/presets/*.toml: how many of the preset's
    (variant, arch) pairs, for the arches this store has, are absent (0 = the store covers it)."""
    from build_tools import manifest
    have = {(v["key"], v["arch"]) for v in variants}
    arches = sorted({v["arch"] for v in variants})
    out = {}
    for name, path in sorted(manifest.preset_paths().items()):
        _, preset_variants = manifest.load(path)
        missing = sum((pv.key, a) not in have for pv in preset_variants for a in arches)
        out[name] = {"arches": arches, "missing": missing}
    return out


def _write_index(out_dir, index):
    index["presets"] = preset_coverage(index["variants"])
    index["variants"].sort(key=lambda v: (v["op"], v["arch"], v["key"]))
    (out_dir / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True))
    _write_runtime_index(out_dir, index)


def _write_runtime_index(out_dir, index):
    """The loader's view, split so a first call parses only its op: runtime/<op>.<arch>.json (compact, no
    build-only fields) and runtime/summary.json. Parsing the whole 2 MB index.json cold took ~100 ms in a cProfile on the
    2-core CPU build machine (a GC pass during the parse; see kernelkiln/_runtime/artifacts.py)."""
    folder = out_dir / "runtime"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    groups = {}
    for v in index["variants"]:
        entry = {k: v[k] for k in ("op", "key", "variant", "arch", "cubin", "sha256", "spec")}
        groups.setdefault((v["op"], v["arch"]), []).append(entry)
    for (op, arch), entries in sorted(groups.items()):
        (folder / f"{op}.{arch}.json").write_text(json.dumps(entries, separators=(",", ":"), sort_keys=True))
    summary = {k: index[k] for k in ("format", "arches", "toolchain")}
    summary["ops"] = sorted({op for op, _ in groups})
    (folder / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))


def merge(stores, out_dir, log=print):
    """One store from shard stores. Same toolchain and manifest required; a variant present in
    two shards must have the same bytes (sha256), else the merge fails."""
    indexes = [json.loads((d / "index.json").read_text()) for d in stores]
    for field in ("format", "toolchain", "manifest_sha256"):
        values = {json.dumps(ix[field], sort_keys=True) for ix in indexes}
        if len(values) > 1:
            raise PackageError(f"cannot merge stores built with different {field}: {sorted(values)}")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    merged = {}
    for d, ix in zip(stores, indexes):
        for v in ix["variants"]:
            ident = (v["op"], v["arch"], v["key"])
            image = (d / v["cubin"]).read_bytes()
            if hashlib.sha256(image).hexdigest() != v["sha256"]:
                raise PackageError(f"{d / v['cubin']}: contents do not match its index entry")
            if ident in merged:
                if merged[ident]["sha256"] != v["sha256"]:
                    raise PackageError(f"conflict: {v['key']} [{v['arch']}] differs between shards")
                continue
            merged[ident] = v
            (out_dir / v["cubin"]).write_bytes(image)
    index = dict(indexes[0], arches=sorted({a for ix in indexes for a in ix["arches"]}), variants=list(merged.values()))
    _write_index(out_dir, index)
    log(f"merged {len(stores)} stores: {len(merged)} kernels into {out_dir}")
    return index


def check_store(store, arches=None):
    """Verify a prebuilt store (KERNELKILN_PREBUILT_STORE): its index format, every cubin present with the
    indexed sha256 and size, and (if given) that it holds every requested arch. Returns the index."""
    path = Path(store) / "index.json"
    if not path.is_file():
        raise PackageError(f"{store}: no index.json (expected a store written by `build_tools build` or `merge`)")
    index = json.loads(path.read_text())
    if index.get("format") != 1 or not isinstance(index.get("variants"), list):
        raise PackageError(f"{path}: not a format-1 kernel index")
    for v in index["variants"]:
        cubin = Path(store) / v["cubin"]
        if not cubin.is_file():
            raise PackageError(f"{store}: {v['cubin']} ({v['key']} [{v['arch']}]) is missing")
        image = cubin.read_bytes()
        if len(image) != v["bytes"] or hashlib.sha256(image).hexdigest() != v["sha256"]:
            raise PackageError(f"{cubin}: contents do not match its index entry")
    missing = sorted(set(arches or ()) - set(index["arches"]))
    if missing:
        raise PackageError(f"{store}: built for {index['arches']}, missing requested arches {missing}")
    return index
