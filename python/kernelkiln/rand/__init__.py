"""Random numbers (tile_kernels 2.1 ``rand``): ``randn``, ``randn_like``, ``set_seed``.

On CUDA the peer's ``randn`` is ``torch.randn`` under the same generator, and so is ours: the streams are equal by
construction (tests/rand checks them), with torch's Philox offsets and CUDA-graph support. A kernel of our own would
have to replicate torch's grid-dependent offset bookkeeping to give the same numbers. ``set_seed`` seeds torch and the
module's seed counter, which an Ascend kernel draws its per-launch seeds from (``_reserve_seed``;
docs/SPEC.md §3.11).
"""
import torch

from kernelkiln import config

_MASK32 = 0xFFFFFFFF
_seed = torch.initial_seed()


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    for s in size:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"size must be ints or one tuple of ints, got {size!r}")
        if s < 0:
            raise ValueError(f"size must be non-negative, got {size!r}")
    return tuple(size)


def randn(*size, dtype=None, device=None):
    """Standard normal samples of ``size`` (ints or one tuple), ``dtype`` (default: torch's), on ``device``
    (default: the current accelerator, ``kernelkiln.config.get_device()``)."""
    return torch.randn(_shape(size), dtype=dtype, device=device or config.get_device())


def randn_like(input):
    """``randn`` of ``input``'s shape, dtype and device."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"input must be a torch.Tensor, got {type(input).__name__}")
    return randn(input.shape, dtype=input.dtype, device=input.device)


def set_seed(seed):
    """Seed torch's generators (``torch.manual_seed``) and this module's seed counter."""
    global _seed
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    torch.manual_seed(seed)
    _seed = seed


def _reserve_seed(num_blocks):
    """A 32-bit seed for a launch of ``num_blocks`` blocks (a finalizer hash of the counter), advancing the counter
    by ``num_blocks``: each block seeds its generator with ``seed + block``, so consecutive launches never share
    one. Used by the Ascend kernel (not built yet: no CANN toolkit here)."""
    global _seed
    s = (_seed + 0x9E3779B9) & _MASK32
    s = ((s ^ (s >> 16)) * 0x21F0AAAD) & _MASK32
    s = ((s ^ (s >> 15)) * 0x735A2D97) & _MASK32
    s ^= s >> 15
    _seed += num_blocks
    return s


__all__ = ["randn", "randn_like", "set_seed"]
