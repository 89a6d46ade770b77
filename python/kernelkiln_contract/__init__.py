"""Op contracts shared by the kernels, the build and the runtime (no torch, no TileLang).

``CONTRACTS`` maps every op with a kernel to its ``OpContract`` (kernelkiln_contract._core): the build iterates it
instead of scanning kernel sources, the runtime takes its variant-selection rules and launch-argument names from it.
"""
from kernelkiln_contract import moe, quant, quant_fused, selftest, transform, transpose
from kernelkiln_contract._core import OpContract, Param  # noqa: F401


def _collect(*families):
    out = {}
    for family in families:
        for c in family.CONTRACTS:
            if c.op in out:
                raise RuntimeError(f"op {c.op!r} is declared twice ({out[c.op].kernel}, {c.kernel})")
            out[c.op] = c
    return out


CONTRACTS = _collect(quant, quant_fused, moe, transpose, transform, selftest)


def get(op):
    try:
        return CONTRACTS[op]
    except KeyError:
        raise KeyError(f"unknown op {op!r}; declared ops: {sorted(CONTRACTS)}") from None
