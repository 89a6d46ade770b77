"""Side-by-side cases of ``rand``: ``randn`` and ``randn_like`` of the peer's 2.1.0 ``tile_kernels.rand`` (both in
kernelkiln.rand), at T = 16384 x hidden 7168. On CUDA both draw from torch's generator, so the compared calls are
seeded (``Calls.seed``: the harness calls ``m.rand.set_seed`` before each) and must give the same numbers.

Not covered: ``set_seed`` (no kernel; the harness calls it for the seeded comparisons).
"""
from functools import partial

import torch

from .common import Calls, Case

H = 7168
SEED = 1234
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _case(name, build, **params):
    """A case whose params are exactly its builder's keyword arguments."""
    return Case(name, params, partial(build, **params))


def _randn(device, T, H, dtype):
    return Calls(lambda m: m.rand.randn(T, H, dtype=DTYPES[dtype], device=device), seed=SEED)


def _randn_like(device, T, H, dtype):
    x = torch.empty(T, H, dtype=DTYPES[dtype], device=device)  # only its shape, dtype and device are read
    return Calls(lambda m: m.rand.randn_like(x), seed=SEED)


def cases(quick=False):
    t = 256 if quick else 16384
    yield _case("rand.randn", _randn, T=t, H=H, dtype="fp32")
    yield _case("rand.randn_like", _randn_like, T=t, H=H, dtype="bf16")
