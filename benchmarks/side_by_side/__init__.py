"""Cases of the side-by-side benchmark (benchmarks/bench_side_by_side.py), one module per family.

Each family module defines ``cases(quick=False)``, which yields :class:`Case` objects. A case's ``build(device)``
makes its inputs and returns a :class:`Calls`; ``run(m)`` and ``once(m)`` take the top-level package (``tile_kernels``
or ``kernelkiln``: the API is the same, so one lambda serves both) and return the op's raw results. ``quick`` shrinks
the token counts for the CPU dry run (tests/runtime/test_side_by_side_cases_cpu.py), which binds every call against
both packages' signatures without running a kernel.
"""
from .common import Calls, Case  # noqa: F401

FAMILIES = ("quant", "moe", "transform", "rand", "engram", "mhc")


def all_cases(quick=False, families=FAMILIES):
    import importlib
    for fam in families:
        yield from importlib.import_module(f"{__name__}.{fam}").cases(quick=quick)
