"""Argument validation shared by the ops: every failure names the argument and what is allowed."""
import os

import torch

DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}


def tensor(name, t, dtypes, ndim=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d) for d in dtypes)
        raise TypeError(f"{name} has dtype {t.dtype}; allowed: {allowed}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")


def cuda(name, t):
    """Checked after shapes and options, so those errors are testable without a GPU."""
    if t.device.type != "cuda":
        if t.device.type == "npu":
            from kernelkiln_contract import CONTRACTS
            ops = sorted(op for op, c in CONTRACTS.items() if getattr(c, "ascend", None) is not None)
            raise ValueError(f"{name} is on {t.device}: this call has no Ascend (NPU) kernel in KernelKiln; it needs a "
                             f"CUDA tensor (the ops with Ascend kernels: {', '.join(ops) or 'none'})")
        raise ValueError(f"{name} is on {t.device}; KernelKiln kernels need a CUDA tensor")


def on_npu(t):
    """Whether ``t`` is on an Ascend NPU: an op with Ascend kernels then runs them (the tensors' device type chooses
    the backend). ``is_cuda`` first: a CUDA call pays ~70 ns for the question, not the ~0.5 us of ``device.type``."""
    return not t.is_cuda and t.device.type == "npu"


def same_device(name, t, ref_name, ref):
    if t.device != ref.device:
        raise ValueError(f"{name} is on {t.device} but {ref_name} is on {ref.device}; they must share a device")


def aligned(name, t, byte_alignment):
    if t.data_ptr() % byte_alignment:
        raise ValueError(f"{name} must start at a {byte_alignment}-byte aligned address (a fresh or "
                         f"suitably sliced tensor); got offset {t.data_ptr() % byte_alignment}")


def choice(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")


def flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def scale_flags(round_sf, use_packed_ue8m0, **other_flags):
    """The scale options of the casts: each a bool, and packed UE8M0 only with power-of-two scales."""
    for name, v in (("round_sf", round_sf), ("use_packed_ue8m0", use_packed_ue8m0), *other_flags.items()):
        flag(name, v)
    if use_packed_ue8m0 and not round_sf:
        raise ValueError("use_packed_ue8m0=True requires round_sf=True (UE8M0 holds powers of two only)")


def out_pair(out, use_tma_aligned_col_major_sf):
    """(data, sf) of a caller's out= buffers; their scales are row-major, so col-major is refused."""
    if use_tma_aligned_col_major_sf:
        raise ValueError("out= takes row-major scales only; use_tma_aligned_col_major_sf must be False with out")
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError("out must be a (data, sf) tuple of preallocated tensors")
    return out


# Synchronize after each kernel that reports errors through host-mapped flags and raise at once
# (KERNELKILN_SYNC_CHECKS=1 or kernelkiln.moe.set_sync_checks); shared by the routing and quant ops.
sync_checks = [os.environ.get("KERNELKILN_SYNC_CHECKS", "0") == "1"]


def contiguous(name, t):
    """Kernels that address a tensor as one flat array need it compact and row-major."""
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (row-major, no gaps), got strides {tuple(t.stride())} for shape "
                         f"{tuple(t.shape)}; pass {name}.contiguous()")


def int_arg(name, value):
    """A Python int (not a bool, not a tensor); a SymInt where torch.compile traces with dynamic shapes."""
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise TypeError(f"{name} must be a Python int, got {type(value).__name__}")


def float_arg(name, value):
    """A Python number passed to a kernel as an fp32 scalar (a SymInt/SymFloat under dynamic tracing)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.SymInt, torch.SymFloat)):
        raise TypeError(f"{name} must be a Python float, got {type(value).__name__}")
