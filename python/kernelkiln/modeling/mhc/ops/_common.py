"""Shared pieces of the v1 mHC autograd layer: argument checks and the residual-gradient protocol.

The protocol (tile_kernels 1.0.0's): a residual tensor of one block feeds three consumers, ``mhc_post`` (d_residual),
``mhc_pre_apply_mix`` and ``mhc_pre_norm_fn`` (their x gradients). Instead of three bf16 gradients that autograd
adds, MHCPost's backward hangs its fresh ``d_residual`` on the residual's storage as ``grad_from_mhc_post``; the two
others, which run later in the backward, add their contributions into that buffer in place (one rounding each
inside their kernels) and return None for the residual; the last one (norm_fn with ``fuse_grad_acc``) removes the
attribute. The buffer is also what MHCPost returned to autograd, so the residual's producer sees the full sum.
A storage attribute is invisible to a traced graph, so under torch.compile the layer returns every gradient
explicitly instead (autograd adds them).
"""
import math

import torch

from kernelkiln._ops import checks

GRAD_ATTR = "grad_from_mhc_post"


def compiling():
    return torch.compiler.is_compiling()


def rows(t, trailing):
    """The number of rows of ``t`` when its last ``trailing`` dimensions are one row."""
    return math.prod(t.shape[:t.dim() - trailing])


def streams(name, t):
    """(m, H) of a bf16 ``[..., m, H]`` residual."""
    checks.tensor(name, t, (torch.bfloat16,))
    if t.dim() < 2:
        raise ValueError(f"{name} must be [..., mhc_mult, hidden_size], got shape {tuple(t.shape)}")
    return t.shape[-2], t.shape[-1]


def shaped(name, t, dtype, shape, what, ndim=None):
    checks.tensor(name, t, (dtype,))
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {what} = {list(shape)}, got {list(t.shape)}")


def optional_out(out, shape, like_name, like):
    if out is None:
        return
    checks.tensor("out", out, (torch.bfloat16,))
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out must have shape {list(shape)}, got {list(out.shape)}")
    checks.contiguous("out", out)
    checks.same_device("out", out, like_name, like)


def fused_buffer(t):
    """The ``grad_from_mhc_post`` buffer on ``t``'s storage (None when absent), checked to cover ``t``."""
    buf = getattr(t.untyped_storage(), GRAD_ATTR, None)
    if buf is None:
        return None
    if not isinstance(buf, torch.Tensor) or buf.dtype != t.dtype or buf.numel() != t.numel() \
            or not buf.is_contiguous():
        raise RuntimeError(f"the residual's {GRAD_ATTR} buffer does not match it (a {t.dtype} tensor of "
                           f"{t.numel()} elements, contiguous, was expected); was the residual's storage shared "
                           f"with another tensor given to mhc_post?")
    return buf.view(t.shape)


def set_fused_buffer(t, buf):
    setattr(t.untyped_storage(), GRAD_ATTR, buf)


def clear_fused_buffer(t):
    storage = t.untyped_storage()
    if hasattr(storage, GRAD_ATTR):
        delattr(storage, GRAD_ATTR)


def grads_or_zeros(grads, shapes, device):
    """Output gradients, contiguous, with None (an output that reached no loss) as fp32 zeros of its shape."""
    return [torch.zeros(shape, dtype=torch.float32, device=device) if g is None else g.contiguous()
            for g, shape in zip(grads, shapes)]
