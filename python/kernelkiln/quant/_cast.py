"""quant.cast: element-wise dtype conversion with optional deterministic stochastic rounding.

tile_kernels 2.1 signature ``cast(x, dtype, stochastic_rounding=False)``. The tensor
is flattened; q (the hash's quad index) is the global quad index of the flattened
tensor. Numerics: ``kernelkiln.torch.stochastic.cast_dtype`` (bit-exact oracle).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln_contract.quant import CAST as CONTRACT

OP = CONTRACT.op
_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float8_e4m3fn: "float8_e4m3fn"}
STOCHASTIC_PAIRS = ((torch.float32, torch.bfloat16), (torch.float32, torch.float8_e4m3fn),
                    (torch.bfloat16, torch.float8_e4m3fn))
RNE_PAIRS = STOCHASTIC_PAIRS + ((torch.bfloat16, torch.float32), (torch.float8_e4m3fn, torch.bfloat16),
                                (torch.float8_e4m3fn, torch.float32))
# One launch handles at most this many elements (a multiple of every CTA tile), so the
# kernel's int32 indices cannot overflow; q continues across launches through quad_base.
CHUNK = 1 << 30


def _pairs_text(pairs):
    return ", ".join(f"{a} -> {b}" for a, b in pairs)


def check_args(x, dtype, stochastic_rounding):
    """Every check that needs no GPU (shared by the op and its fake)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    checks.flag("stochastic_rounding", stochastic_rounding)
    pairs = STOCHASTIC_PAIRS if stochastic_rounding else RNE_PAIRS
    if (x.dtype, dtype) not in pairs:
        what = "stochastic_rounding=True supports" if stochastic_rounding else "supported conversions:"
        raise ValueError(f"cannot cast x of dtype {x.dtype} to {dtype}; {what} {_pairs_text(pairs)}")
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous (it is flattened); got shape {tuple(x.shape)}, strides "
                         f"{tuple(x.stride())}; call x.contiguous() first")
    if stochastic_rounding and x.numel() % 4:
        raise ValueError(f"stochastic_rounding=True needs x.numel() % 4 == 0 (values are hashed in quads), "
                         f"got numel {x.numel()}")


def cast(x, dtype, stochastic_rounding=False):
    """Convert ``x`` to ``dtype`` (same shape), rounding to nearest even or stochastically."""
    check_args(x, dtype, stochastic_rounding)
    checks.cuda("x", x)
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    n = x.numel()
    if n == 0:
        return out
    if x.data_ptr() % 16:
        x = x.clone()  # a misaligned view (e.g. x[1:]): the kernel reads 16-byte vectors
    values = CONTRACT.key(in_dtype=_NAMES[x.dtype], out_dtype=_NAMES[dtype], stochastic_rounding=stochastic_rounding)
    xf, of = x.reshape(-1), out.reshape(-1)
    for start in range(0, n, CHUNK):
        count = min(CHUNK, n - start)
        quad = (start // 4) & 0xFFFFFFFF
        quad_base = quad - (1 << 32) if quad >= 1 << 31 else quad  # the same 32 bits, as an int32
        launch(CONTRACT, values, x.device, x=xf[start:].data_ptr(), out=of[start:].data_ptr(), n=count,
               quad_base=quad_base)
    return out
