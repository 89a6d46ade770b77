"""v1 top2_sum_gate: the DeepSeek-V3 group-limited router (docs/SPEC.md §2.3, §3.1).

Non-finite logits/bias of an active token are reported like topk_gate's: the row
becomes -1 / 0 and NonFiniteScoresError is raised by the next routing call or
``check_errors()`` (moe/_topk.py holds the per-device host-mapped error word).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln.moe import _topk
from kernelkiln_contract.moe import TOP2_SUM_GATE as CONTRACT
from kernelkiln_contract.moe import experts_per_lane

OP = CONTRACT.op
SCORING = {"sigmoid": 0, "sqrtsoftplus": 1}
MAX_EXPERTS = 512
WARP = 32
MASK, FIX, MAP, UNMAPPED, VEC4, BIAS4, COMPACT = 1, 2, 4, 8, 16, 32, 64
# Let the kernel compact the kept groups into half-lists (K == ceil(E / 32), e.g. DeepSeek-V3's E = 256, K = 8):
# same results, fewer instructions (kernels/moe/top2_sum_gate.py). A switch so both paths stay testable.
USE_COMPACTION = True


def _int(name, v, lo, hi=None):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, got {v!r}")
    if v < lo or (hi is not None and v > hi):
        raise ValueError(f"{name} must be in {lo}..{hi if hi is not None else 'inf'}, got {v}")


def _token_mask(name, m, t, ref):
    checks.tensor(name, m, (torch.bool,), ndim=1)
    if m.shape[0] != t:
        raise ValueError(f"{name} must have shape [{t}] (one flag per token), got {tuple(m.shape)}")
    if t and m.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous")
    checks.same_device(name, m, "logits", ref)


def _unmapped_idx(u, t, num_topk, logits):
    """The fixed-routing experts: int64 [T, K], inner stride 1 (shared by the two routers)."""
    if u is None:
        return
    checks.tensor("unmapped_topk_idx", u, (torch.int64,), ndim=2)
    if tuple(u.shape) != (t, num_topk) or (t and u.stride(1) != 1):
        raise ValueError(f"unmapped_topk_idx must be [{t}, {num_topk}] with inner stride 1, got shape "
                         f"{tuple(u.shape)} strides {tuple(u.stride())}")
    checks.same_device("unmapped_topk_idx", u, "logits", logits)


def _physical_map(to_physical_map, logical_count, e, s, logits):
    """The EPLB logical -> physical map: D (replica slots per expert), 1 without a map."""
    if (to_physical_map is None) != (logical_count is None):
        raise ValueError("to_physical_map and logical_count must be given together")
    if to_physical_map is None:
        return 1
    checks.tensor("to_physical_map", to_physical_map, (torch.int32,), ndim=2)
    checks.tensor("logical_count", logical_count, (torch.int32,), ndim=1)
    if to_physical_map.shape[0] != e + s or not to_physical_map.is_contiguous() or to_physical_map.shape[1] < 1:
        raise ValueError(f"to_physical_map must be a contiguous [E + S = {e + s}, D >= 1] int32 tensor, got shape "
                         f"{tuple(to_physical_map.shape)}")
    if tuple(logical_count.shape) != (e + s,) or logical_count.stride(0) != 1:
        raise ValueError(f"logical_count must be a contiguous [{e + s}] int32 tensor, got shape "
                         f"{tuple(logical_count.shape)}")
    checks.same_device("to_physical_map", to_physical_map, "logits", logits)
    checks.same_device("logical_count", logical_count, "logits", logits)
    return to_physical_map.shape[1]


def check(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed, num_shared_experts,
          routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks, scoring_func, mask,
          fix_routing_mask, to_physical_map, logical_count, unmapped_topk_idx):
    """Validate everything that needs no device work; returns (T, E, S, D) with D = map columns."""
    checks.tensor("logits", logits, (torch.float32,), ndim=2)
    t, e = logits.shape
    if t and not logits.is_contiguous():
        raise ValueError(f"logits must be contiguous, got strides {tuple(logits.stride())}")
    if not 1 <= e <= MAX_EXPERTS:
        raise ValueError(f"logits.shape[1] (experts) must be in 1..{MAX_EXPERTS}, got {e}")
    checks.tensor("bias", bias, (torch.float32,), ndim=1)
    if bias.shape[0] != e or bias.stride(0) != 1:
        raise ValueError(f"bias must be a contiguous [{e}] tensor (one per expert), got shape {tuple(bias.shape)}")
    checks.same_device("bias", bias, "logits", logits)
    if scoring_func not in SCORING:
        extra = " (softmax scoring is not implemented by KernelKiln)" if scoring_func == "softmax" else ""
        raise ValueError(f"scoring_func must be one of {list(SCORING)}, got {scoring_func!r}{extra}")
    checks.flag("use_shared_as_routed", use_shared_as_routed)
    _int("num_shared_experts", num_shared_experts, 0)
    s = num_shared_experts if use_shared_as_routed else 0
    _int("num_topk", num_topk, 1, min(e, WARP - s))
    if use_shared_as_routed and s not in (1, 2):
        raise ValueError(f"num_shared_experts must be 1 or 2 when use_shared_as_routed, got {num_shared_experts}")
    if s and num_topk % s:
        raise ValueError(f"num_topk ({num_topk}) must be a multiple of num_shared_experts ({s})")
    _int("num_groups", num_groups, 0, WARP)
    _int("num_topk_groups", num_topk_groups, 0, num_groups)
    if (num_groups == 0) != (num_topk_groups == 0):
        raise ValueError("num_groups and num_topk_groups must both be 0 (no grouping) or both positive, got "
                         f"{num_groups} and {num_topk_groups}")
    if num_groups:
        if e % num_groups:
            raise ValueError(f"experts ({e}) must be a multiple of num_groups ({num_groups})")
        per_group = e // num_groups
        if not 2 <= per_group <= WARP:
            raise ValueError(f"experts per group (E / num_groups = {per_group}) must be in 2..{WARP}")
        if num_topk > num_topk_groups * per_group:
            raise ValueError(f"num_topk ({num_topk}) exceeds the experts of the kept groups "
                             f"({num_topk_groups} x {per_group})")
        epl = experts_per_lane(e)
        lanes = per_group // epl if per_group % epl == 0 else 0
        if num_groups != num_topk_groups and (lanes == 0 or lanes & (lanes - 1)):
            raise ValueError(f"group layout not supported: experts per group ({per_group}) must be a power-of-two "
                             f"multiple of ceil(E / 32) = {epl} (true for E = 256 with 1..32 groups)")
    if not isinstance(routed_scaling_factor, (int, float)) or isinstance(routed_scaling_factor, bool):
        raise TypeError(f"routed_scaling_factor must be a float, got {routed_scaling_factor!r}")
    _int("num_ep_ranks", num_ep_ranks, 1)
    _int("ep_rank", ep_rank, 0, num_ep_ranks - 1)
    _int("num_tp_ranks", num_tp_ranks, 1)
    _int("tp_rank", tp_rank, 0, num_tp_ranks - 1)
    if mask is not None:
        _token_mask("mask", mask, t, logits)
    if fix_routing_mask is not None:
        _token_mask("fix_routing_mask", fix_routing_mask, t, logits)
        if unmapped_topk_idx is None:
            raise ValueError("fix_routing_mask needs unmapped_topk_idx (the fixed rows' experts)")
    _unmapped_idx(unmapped_topk_idx, t, num_topk, logits)
    d = _physical_map(to_physical_map, logical_count, e, s, logits)
    if to_physical_map is not None and s and d - 1 < s:  # the shared experts' replicas need slots too
        raise ValueError(f"to_physical_map.shape[1] - 1 (duplicate slots, {d - 1}) must be >= "
                         f"num_shared_experts ({s})")
    if (e + d - 1) // num_ep_ranks < 1:
        raise ValueError(f"num_ep_ranks ({num_ep_ranks}) exceeds the expert count ({e + d - 1})")
    return t, e, s, d


def top2_sum_gate(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed, num_shared_experts,
                  routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks, scoring_func, mask=None,
                  fix_routing_mask=None, to_physical_map=None, logical_count=None, unmapped_topk_idx=None):
    t, e, s, d = check(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed,
                       num_shared_experts, routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks,
                       scoring_func, mask, fix_routing_mask, to_physical_map, logical_count, unmapped_topk_idx)
    device = logits.device
    idx = torch.empty((t, num_topk + s), dtype=torch.int64, device=device)
    weights = torch.empty((t, num_topk + s), dtype=torch.float32, device=device)
    if t == 0:
        return idx, weights
    checks.cuda("logits", logits)
    dev = device.index
    _topk._raise_pending(dev)
    epl = experts_per_lane(e)
    flags = 0
    dummy = idx.data_ptr()  # stands in for absent optional buffers (never read: flags say so)
    ptr = {"mask": dummy, "fix": dummy, "map": dummy, "count": dummy, "un": dummy}
    if mask is not None:
        flags |= MASK
        ptr["mask"] = mask.data_ptr()
    if fix_routing_mask is not None:
        flags |= FIX
        ptr["fix"] = fix_routing_mask.data_ptr()
    if to_physical_map is not None:
        flags |= MAP
        ptr["map"], ptr["count"] = to_physical_map.data_ptr(), logical_count.data_ptr()
    un_stride = 0
    if unmapped_topk_idx is not None:
        flags |= UNMAPPED
        ptr["un"], un_stride = unmapped_topk_idx.data_ptr(), unmapped_topk_idx.stride(0)
    if epl % 4 == 0 and e % 4 == 0 and logits.data_ptr() % 16 == 0:
        flags |= VEC4
    if epl % 4 == 0 and bias.data_ptr() % 16 == 0:
        flags |= BIAS4
    if USE_COMPACTION:
        flags |= COMPACT
    grouped = num_groups and num_groups != num_topk_groups
    lpg_shift = ((e // num_groups) // epl).bit_length() - 1 if grouped else 0
    launch(CONTRACT, CONTRACT.key(experts_per_lane=epl), device,
           logits=logits.data_ptr(), bias=bias.data_ptr(), mask=ptr["mask"], fix_mask=ptr["fix"],
           to_physical_map=ptr["map"], logical_count=ptr["count"], unmapped=ptr["un"], topk_idx=idx.data_ptr(),
           topk_weights=weights.data_ptr(), err=_topk._flag(dev)[0].data_ptr(), num_tokens=t, num_experts=e,
           experts_div4=e // 4, num_topk=num_topk, num_groups=num_groups, num_topk_groups=num_topk_groups,
           lpg_shift=lpg_shift, num_shared=s, routed_scaling_factor=float(routed_scaling_factor), ep_rank=ep_rank,
           experts_per_rank=(e + d - 1) // num_ep_ranks, tp_rank=tp_rank, num_tp_ranks=num_tp_ranks, map_cols=d,
           unmapped_stride=un_stride, scoring=SCORING[scoring_func], flags=flags)
    if _topk._sync_checks[0] and not torch.cuda.is_current_stream_capturing():
        torch.cuda.current_stream(dev).synchronize()
        _topk._raise_pending(dev)
    return idx, weights
