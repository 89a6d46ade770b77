"""mhc_sinkhorn_fwd (tile_kernels 2.1 ``mhc.mhc_sinkhorn_fwd``): Sinkhorn normalization of the m×m mixing logits
into a preallocated output.

Spec: kernelkiln_contract.mhc_sinkhorn.MHC_SINKHORN_FWD (docs/spec/mhc_sinkhorn.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln_contract.mhc_sinkhorn import MHC_SINKHORN_FWD as CONTRACT
from kernelkiln_contract.mhc_sinkhorn import SINKHORN_MULTS

__all__ = ["mhc_sinkhorn_fwd"]


def check_matrices(named):
    """m of the ``[n, m, m]`` fp32 tensors ``named`` ((name, tensor) pairs, the first one's shape the reference);
    raises naming the argument. Shared with mhc_sinkhorn_bwd."""
    first_name, first = named[0]
    for name, t in named:
        checks.tensor(name, t, (torch.float32,), ndim=3)
    n, m, m2 = first.shape
    if m != m2 or m not in SINKHORN_MULTS:
        raise ValueError(f"{first_name} must have shape [n, m, m] with m (mhc_mult) in {list(SINKHORN_MULTS)}, got "
                         f"{tuple(first.shape)}")
    for name, t in named:
        if tuple(t.shape) != (n, m, m):
            raise ValueError(f"{name} must have {first_name}'s shape {(n, m, m)}, got {tuple(t.shape)}")
        checks.contiguous(name, t)
        checks.same_device(name, t, first_name, first)
    return n, m


def check_repeat_eps(repeat, eps, repeat_name="repeat", eps_name="eps"):
    checks.int_arg(repeat_name, repeat)
    if repeat < 1:
        raise ValueError(f"{repeat_name} must be >= 1 (the number of row/column normalization rounds), got {repeat}")
    checks.float_arg(eps_name, eps)


def _check(comb_res_mix, comb_res_mix_out, repeat, eps):
    n, m = check_matrices((("comb_res_mix", comb_res_mix), ("comb_res_mix_out", comb_res_mix_out)))
    check_repeat_eps(repeat, eps)
    return n, m


def _forward(comb_res_mix, comb_res_mix_out, repeat, eps):
    n, m = _check(comb_res_mix, comb_res_mix_out, repeat, eps)
    checks.cuda("comb_res_mix", comb_res_mix)
    if n:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), comb_res_mix.device, comb_res_mix=comb_res_mix.data_ptr(),
               comb_res_mix_out=comb_res_mix_out.data_ptr(), num_tokens=n, repeat=repeat, eps=float(eps))


@library_op("mhc_sinkhorn_fwd", mutates_args=("comb_res_mix_out",))
def _mhc_sinkhorn_fwd_op(comb_res_mix: torch.Tensor, comb_res_mix_out: torch.Tensor, repeat: int,
                         eps: float) -> None:
    _forward(comb_res_mix, comb_res_mix_out, repeat, eps)


@_mhc_sinkhorn_fwd_op.register_fake
def _mhc_sinkhorn_fwd_fake(comb_res_mix, comb_res_mix_out, repeat, eps):
    _check(comb_res_mix, comb_res_mix_out, repeat, eps)


def mhc_sinkhorn_fwd(comb_res_mix, comb_res_mix_out, repeat: int, eps: float):
    """Sinkhorn-normalize ``comb_res_mix [n, m, m]`` fp32 (softmax over each row + eps, then ``repeat`` rounds of
    column and row division by sum + eps, starting with a column) into the preallocated ``comb_res_mix_out`` (may
    be the input itself); returns None. As tile_kernels 2.1 ``mhc.mhc_sinkhorn_fwd``; repeat >= 1."""
    if torch.compiler.is_compiling():
        return _mhc_sinkhorn_fwd_op(comb_res_mix, comb_res_mix_out, repeat, eps)
    return _forward(comb_res_mix, comb_res_mix_out, repeat, eps)
