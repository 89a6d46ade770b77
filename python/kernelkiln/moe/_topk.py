"""topk_gate (tile_kernels 2.1 signature) and the non-finite-score error channel.

The peer device-asserts on non-finite scores, which kills the CUDA context.
Our kernel instead writes the row's indices as -1 and records the token in a
per-device word of host-mapped pinned memory. Reading it needs no
synchronization, so the error is raised by the next KernelKiln routing call on
that device, or at once by ``check_errors()`` (which synchronizes), or right
after the launch when ``KERNELKILN_SYNC_CHECKS=1`` / ``set_sync_checks(True)``.
"""

import torch

from kernelkiln import config
from kernelkiln._ops import checks, error_flags
from kernelkiln._ops.launch import has_variant, kernel, launch, raw_stream
from kernelkiln._ops.outputs import RowOutputs
from kernelkiln_contract.moe import TOPK_GATE as CONTRACT
from kernelkiln_contract.moe import experts_per_lane, topk_vector_loads

OP = CONTRACT.op
MAX_EXPERTS = 512
MAX_TOPK = 32


class NonFiniteScoresError(FloatingPointError):
    """A routing kernel saw NaN or +-inf scores; its outputs for those rows are -1."""


_sync_checks = checks.sync_checks  # one switch for every op family


def set_sync_checks(enabled: bool) -> None:
    """Synchronize after each checking kernel and raise at once (debugging; not capturable)."""
    checks.flag("enabled", enabled)
    _sync_checks[0] = enabled


# [0] = error set, [1] = an offending token
_flag = error_flags.HostMappedWords(2)


def _raise_pending(device_index):
    words = _flag(device_index)[1]
    if words[0]:
        token = words[1]
        words[0] = 0
        raise NonFiniteScoresError(
            f"topk_gate on cuda:{device_index} found non-finite (NaN or inf) scores (e.g. token {token}); the "
            "indices of those rows were written as -1. Raised at the first KernelKiln routing call or "
            "check_errors() after that kernel finished.")


def check_errors(device=None):
    """Synchronize ``device`` and raise any error a KernelKiln kernel recorded there."""
    if device is not None and not isinstance(device, int) and torch.device(device).type == "npu":
        from kernelkiln.moe import _topk_ascend
        return _topk_ascend.raise_pending(_topk_ascend.ascend.device_index(torch.device(device)))
    config.require_cuda("check_errors")
    index = torch.cuda.current_device() if device is None else torch.device(device).index
    torch.cuda.synchronize(index)
    _raise_pending(index)


# Validated launch plans keyed on (experts, strides, device, K): a repeated call costs one
# allocation, the error-word read and the launch.
_plans = {}
_MAX_PLANS = 4096


def _vector_loads(e, aligned, device_index):
    """Whether to use the float4-load variant: rows of whole float4 chunks per lane, a 16-byte
    aligned base, and the variant built (the scalar-load variant serves every case)."""
    return topk_vector_loads(e, aligned) and has_variant(
        CONTRACT, CONTRACT.key(experts_per_lane=experts_per_lane(e), vector_loads=True), device_index)


def _make_plan(scores, num_topk):
    e = scores.shape[1]
    device, index = scores.device, scores.device.index
    epl = experts_per_lane(e)
    words = _flag(index)
    state = config._state
    # per call only (scores, indices, num_tokens) are packed (bound_launcher_named); launchers[aligned]: the
    # float4 variant where the row layout and alignment allow it
    fixed = dict(err=words[0].data_ptr(), num_experts=e, experts_div4=e >> 2, num_topk=num_topk)
    launchers = {aligned: kernel(CONTRACT, CONTRACT.variant(experts_per_lane=epl,
                                                            vector_loads=_vector_loads(e, aligned, index)), index)
                 .bound_launcher_named(index, fixed, ("scores", "topk_idx", "num_tokens")) for aligned in (False, True)}
    pending, idx_out, empty_like = words[1], RowOutputs(num_topk, torch.int64, device), torch.empty_like

    def run(scores, t):
        if pending[0] or t == 0:
            return None  # pending error or empty input: the general path handles it
        ptr = scores.data_ptr()
        idx = empty_like(idx_out[t])
        launchers[ptr & 15 == 0](raw_stream(index), (ptr, idx.data_ptr(), t), state["pdl"])
        return idx

    return run


def topk_gate(scores, num_topk):
    """Indices [T, K] int64 of the K largest scores per row; ties go to the smaller expert index."""
    if type(scores) is torch.Tensor and not _sync_checks[0]:
        shape = scores.shape
        key = (scores.dtype, shape[1:], scores.stride(), scores.get_device(), num_topk, num_topk.__class__)
        plan = _plans.get(key)
        if plan is not None:
            idx = plan(scores, shape[0])
            if idx is not None:
                return idx
        else:
            idx = _topk_gate_checked(scores, num_topk)
            if scores.dim() == 2 and scores.shape[0] > 0 and scores.stride(1) == 1 and \
                    scores.stride(0) == scores.shape[1] and not checks.on_npu(scores):  # NPU calls: no CUDA plan
                if len(_plans) >= _MAX_PLANS:
                    _plans.clear()
                _plans[key] = _make_plan(scores, num_topk)
            return idx
    return _topk_gate_checked(scores, num_topk)


def _topk_gate_checked(scores, num_topk):
    checks.tensor("scores", scores, (torch.float32,), ndim=2)
    t, e = scores.shape
    if not scores.is_contiguous():
        raise ValueError(f"scores must be contiguous, got strides {tuple(scores.stride())}")
    if not 1 <= e <= MAX_EXPERTS:
        raise ValueError(f"scores.shape[1] (experts) must be in 1..{MAX_EXPERTS}, got {e}")
    if isinstance(num_topk, bool) or not isinstance(num_topk, int) or not 1 <= num_topk <= min(e, MAX_TOPK):
        raise ValueError(f"num_topk must be an int in 1..min(experts, {MAX_TOPK}) = 1..{min(e, MAX_TOPK)}, "
                         f"got {num_topk!r}")
    if checks.on_npu(scores):  # the tensors' device chooses the backend
        from kernelkiln.moe import _topk_ascend
        return _topk_ascend.topk_gate(scores, num_topk)
    checks.cuda("scores", scores)
    idx = torch.empty((t, num_topk), dtype=torch.int64, device=scores.device)
    if t == 0:
        return idx
    dev = scores.device.index
    _raise_pending(dev)
    vec = _vector_loads(e, scores.data_ptr() % 16 == 0, dev)
    flag = _flag(dev)[0]
    launch(CONTRACT, CONTRACT.key(experts_per_lane=experts_per_lane(e), vector_loads=vec), scores.device,
           scores=scores.data_ptr(), topk_idx=idx.data_ptr(), err=flag.data_ptr(), num_tokens=t, num_experts=e,
           experts_div4=e // 4, num_topk=num_topk)
    if _sync_checks[0] and not torch.cuda.is_current_stream_capturing():
        torch.cuda.current_stream(dev).synchronize()
        _raise_pending(dev)
    return idx
