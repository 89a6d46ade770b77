"""Op contracts shared by the kernels, the build and the runtime (no torch, no TileLang).

``CONTRACTS`` maps every op with a kernel to its ``OpContract`` (kernelkiln_contract._core): the build iterates it
instead of scanning kernel sources, the runtime takes its variant-selection rules and launch-argument names from it.
Every public module of this package is a family of contracts; its ``CONTRACTS`` tuple lists them, and a new module
needs no line here.
"""
import importlib
import pkgutil

from kernelkiln_contract._core import OpContract, Param  # noqa: F401


def _collect():
    out = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        family = importlib.import_module(f"{__name__}.{info.name}")
        for c in getattr(family, "CONTRACTS", ()):
            if c.op in out:
                raise RuntimeError(f"op {c.op!r} is declared twice ({out[c.op].kernel}, {c.kernel})")
            out[c.op] = c
    return out


CONTRACTS = _collect()


def get(op):
    try:
        return CONTRACTS[op]
    except KeyError:
        raise KeyError(f"unknown op {op!r}; declared ops: {sorted(CONTRACTS)}") from None
