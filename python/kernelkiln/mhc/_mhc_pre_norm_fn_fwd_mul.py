"""mhc_pre_norm_fn_fwd_mul (tile_kernels 1.0's private ``_mhc_pre_norm_fn_fwd_mul``, which v1's ``mhc_pre_norm_fn``
calls with one RMS group): the pre-norm projection ``x · fnᵀ`` on TF32 tensor cores and the rows' sums of squares.

Spec: kernelkiln_contract.mhc_norm_fn.MHC_PRE_NORM_FN_FWD_MUL (docs/spec/mhc_norm_fn.md). This module also holds the
argument checks and the launch the backward shares. The kernels read their sizes from the tensors' shapes (the
PrimFunc's shape symbols), so they launch through ``CompiledKernel.bind`` with the tensors themselves.
"""
import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import kernel, raw_stream
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_head_compute_mix_fwd import f32_tensor, on_device
from kernelkiln_contract.mhc_norm_fn import FWD_HIDDEN, PAD_ROWS
from kernelkiln_contract.mhc_norm_fn import MHC_PRE_NORM_FN_FWD_MUL as CONTRACT

__all__ = ["mhc_pre_norm_fn_fwd_mul"]

TMA_ALIGN = 16  # bytes: the forward's TMA loads need 16-byte aligned bases (and row strides, which K % 8 gives)


def check_x_fn(x, fn, hidden_multiple):
    """(n, K, m3) of x ``[n, K]`` bf16 and fn ``[m3, K]`` fp32, both contiguous and on one device, with
    1 <= m3 <= PAD_ROWS and K a multiple of ``hidden_multiple``."""
    checks.tensor("x", x, (torch.bfloat16,), ndim=2)
    checks.contiguous("x", x)
    n, k = x.shape
    checks.tensor("fn", fn, (torch.float32,), ndim=2)
    checks.contiguous("fn", fn)
    checks.same_device("fn", fn, "x", x)
    m3 = fn.shape[0]
    if fn.shape[1] != k:
        raise ValueError(f"fn must have shape [mhc_mult3, K] with K = x.shape[1] = {k}, got {list(fn.shape)}")
    if not 1 <= m3 <= PAD_ROWS:
        raise ValueError(f"fn.shape[0] (mhc_mult3) must be in 1..{PAD_ROWS} (the rows are padded to one "
                         f"{PAD_ROWS}-row tensor-core tile), got {m3}")
    if k % hidden_multiple:
        raise ValueError(f"x.shape[1] (K = mhc_mult · hidden) must be a multiple of {hidden_multiple}, got {k}")
    return n, k, m3


def launch_bound(contract, device, tensors):
    """Launch ``contract``'s one variant with ``tensors`` (name -> tensor, in the kernel's views): bind() takes the
    data pointers and reads the shape symbols from them."""
    index = device.index
    k = kernel(contract, contract.key(dtype="float32"), index)
    k.launch(index, raw_stream(index), k.bind(*(tensors[name] for name in k.arg_names)), config.get_pdl())


def _check(x, fn, out_mul, sqrsum, device=True):
    n, k, m3 = check_x_fn(x, fn, FWD_HIDDEN)
    f32_tensor("out_mul", out_mul, (n, 1, m3), "[num_tokens, 1, mhc_mult3]", "x", x)
    f32_tensor("sqrsum", sqrsum, (n, 1), "[num_tokens, 1]", "x", x)
    if device:
        on_device(("x", x, TMA_ALIGN), ("fn", fn, TMA_ALIGN), ("out_mul", out_mul, 4), ("sqrsum", sqrsum, 4))
    return n, k, m3


def _forward(x, fn, out_mul, sqrsum):
    n, k, m3 = _check(x, fn, out_mul, sqrsum)
    if not n:
        return
    if not k:  # empty sums; a TMA descriptor of a zero-width tensor cannot be encoded
        out_mul.zero_()
        sqrsum.zero_()
        return
    launch_bound(CONTRACT, x.device, {"x": x, "fn": fn, "out_mul": out_mul.view(n, m3), "sqrsum": sqrsum.view(n)})


@library_op("mhc_pre_norm_fn_fwd_mul", mutates_args=("out_mul", "sqrsum"))
def _op(x: torch.Tensor, fn: torch.Tensor, out_mul: torch.Tensor, sqrsum: torch.Tensor) -> None:
    _forward(x, fn, out_mul, sqrsum)


@_op.register_fake
def _fake(x, fn, out_mul, sqrsum):
    _check(x, fn, out_mul, sqrsum, device=False)


def mhc_pre_norm_fn_fwd_mul(x, fn, out_mul, sqrsum):
    """The pre-norm projection of v1's ``mhc_pre_norm_fn`` (one RMS group, no split-K): ``out_mul[t, 0, j] = Σ_k
    x[t, k] · fn[j, k]`` on TF32 tensor cores and ``sqrsum[t, 0] = Σ_k x[t, k]²`` (fp32, a fixed order), written
    into the preallocated out_mul ``[n, 1, m3]`` and sqrsum ``[n, 1]`` fp32; returns None.

    x ``[n, K]`` bf16 (the m streams of each token flattened, K = m·H a multiple of 256), fn ``[m3, K]`` fp32 with
    1 <= m3 <= 32, already rounded with ``kernelkiln._formats.round_to_tf32`` (the tensor cores ignore the low 13
    bits). Same computation as tile_kernels 1.0's ``_mhc_pre_norm_fn_fwd_mul(m3, 1, K)`` kernel, which writes only
    m3 = 24 columns; this one writes every column j < m3."""
    if torch.compiler.is_compiling():
        return _op(x, fn, out_mul, sqrsum)
    return _forward(x, fn, out_mul, sqrsum)
