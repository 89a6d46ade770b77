"""Specialization manifest: which compile-time variants of which op to build.

A manifest is TOML. Each ``[[op_name]]`` table maps every compile-time
parameter of that op to a list of values; the table expands to the cartesian
product, minus combinations the op's contract (kernelkiln_contract) rejects. Everything else (sizes,
strides, most flags) is a runtime argument, so one variant serves many calls.

    [build]
    arches = ["sm_90a", "sm_100a"]

    [[per_token_cast]]
    in_dtype = ["bfloat16"]
    fmt = ["e4m3"]
    ...
"""
import hashlib
import importlib
import importlib.util
import itertools
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path



def _import_contracts():
    """The op contracts (python/kernelkiln_contract: no torch, no TileLang). In a source tree they are loaded from it,
    by path: putting python/ on sys.path would also shadow an installed kernelkiln with the source tree's (which has
    no kernels) in the same process. In an installed wheel (the JIT fallback's build) they are a top-level package."""
    source = Path(__file__).resolve().parent.parent / "python" / "kernelkiln_contract"
    if "kernelkiln_contract" not in sys.modules and (source / "__init__.py").exists():
        spec = importlib.util.spec_from_file_location("kernelkiln_contract", source / "__init__.py",
                                                      submodule_search_locations=[str(source)])
        module = importlib.util.module_from_spec(spec)
        sys.modules["kernelkiln_contract"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["kernelkiln_contract"]
            raise
    return importlib.import_module("kernelkiln_contract")


kernelkiln_contract = _import_contracts()

CONTRACTS = kernelkiln_contract.CONTRACTS


# op name -> kernel module: every declared op's contract names its module
KERNEL_MODULES = {op: c.kernel for op, c in CONTRACTS.items()}
SUPPORTED_ARCHES = ("sm_90a", "sm_100a")


class ManifestError(ValueError):
    pass


@dataclass(frozen=True)
class Variant:
    op: str
    params: tuple  # ((name, value), ...) in the op's parameter order (its contract's)

    @property
    def key(self):
        return f"{self.op}(" + ",".join(f"{k}={_fmt(v)}" for k, v in self.params) + ")"

    @property
    def stem(self):
        """File stem, stable across machines: op name + hash of the key."""
        return f"{self.op}-{hashlib.sha256(self.key.encode()).hexdigest()[:12]}"

    def as_dict(self):
        return dict(self.params)


def _fmt(v):
    return str(int(v)) if isinstance(v, bool) else str(v)


def kernel_module(op):
    if op not in KERNEL_MODULES:
        raise ManifestError(f"unknown op {op!r}; known ops: {sorted(KERNEL_MODULES)}")
    return importlib.import_module(KERNEL_MODULES[op])


def load(path):
    with open(path, "rb") as f:
        data = tomllib.load(f)
    arches = data.get("build", {}).get("arches", list(SUPPORTED_ARCHES))
    bad = [a for a in arches if a not in SUPPORTED_ARCHES]
    if bad:
        raise ManifestError(f"{path}: unsupported arches {bad}; supported: {list(SUPPORTED_ARCHES)}")
    variants = []
    for op, tables in data.items():
        if op in ("build", "ascend"):  # [[ascend.<op>]]: the Ascend variants (build_tools/ascend.py)
            continue
        variants.extend(expand(op, tables, source=str(path)))
    if data.get("build", {}).get("representatives", False):
        # every op's own representative variant (its contract's), so a new op needs no entry here
        for op, contract in CONTRACTS.items():
            if contract.representative is not None:
                variants.extend(expand(op, [dict(contract.representative)], source=f"{op}'s contract"))
    return arches, _dedupe(variants)


def _declaration(op):
    """(parameter names, defaults, invalid_reason) of an op, from its contract."""
    contract = CONTRACTS[op]
    return contract.param_names, contract.defaults, contract.invalid_reason


def param_names(op):
    """The compile-time parameter names of ``op``, in variant-key order."""
    if op not in KERNEL_MODULES:
        raise ManifestError(f"unknown op {op!r}; known ops: {sorted(KERNEL_MODULES)}")
    return _declaration(op)[0]


def expand(op, tables, source="<manifest>"):
    if op not in KERNEL_MODULES:
        raise ManifestError(f"unknown op {op!r}; known ops: {sorted(KERNEL_MODULES)}")
    names, defaults, invalid_reason = _declaration(op)  # defaults: knobs added later, so older manifests still work
    out = []
    for table in tables:
        table = {**defaults, **table}
        missing = [n for n in names if n not in table]
        extra = [n for n in table if n not in names]
        if missing or extra:
            raise ManifestError(f"{source}: [[{op}]] must give exactly {list(names)}; "
                                f"missing {missing}, unknown {extra}")
        lists = [table[n] if isinstance(table[n], list) else [table[n]] for n in names]
        for combo in itertools.product(*lists):
            params = dict(zip(names, combo))
            if invalid_reason(params) is None:
                out.append(Variant(op, tuple(params.items())))
    return out


def _dedupe(variants):
    seen, out = set(), []
    for v in variants:
        if v.key not in seen:
            seen.add(v.key)
            out.append(v)
    return out


def default_manifest_path():
    return Path(__file__).resolve().parent.parent / "manifests" / "default.toml"


def preset_paths():
    """{name: path} of the model-family presets (manifests/presets/*.toml); empty outside a source tree."""
    folder = default_manifest_path().parent / "presets"
    return {p.stem: p for p in sorted(folder.glob("*.toml"))}
