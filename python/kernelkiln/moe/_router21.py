"""tile_kernels 2.1 fused router: moe_topk_gate_forward (kernel) and moe_topk_gate_backward (docs/SPEC.md §3.1).

Differences from the peer, by design: non-finite logits of a routed row do not device-assert (that kills
the CUDA context); the row becomes -1 / 0 and NonFiniteScoresError is raised by the next routing call or
``check_errors()`` (the host-mapped error word of moe/_topk.py). Fixed-routing entries outside [0, E)
give idx -1 / weight 0 instead of an assert. The backward is one kernel, deterministic (fixed summation
order, no atomics) but not bit-identical to the torch reference or the fast-math peer; ids outside [0, E)
are skipped like -1. Its inputs must be contiguous.
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln.moe import _topk
from kernelkiln.moe._top2_sum import _int, _physical_map, _token_mask, _unmapped_idx
from kernelkiln_contract.moe import MOE_TOPK_GATE as CONTRACT
from kernelkiln_contract.moe import MOE_TOPK_GATE_BACKWARD as BWD_CONTRACT
from kernelkiln_contract.moe import experts_per_lane

OP = CONTRACT.op
MAX_EXPERTS = 512
WARP = 32
MASK, FIX, MAP, UNMAPPED, VEC4, BIAS, IMAGE, RANDOM, SCORES = 1, 2, 4, 8, 16, 32, 64, 128, 256
BWD_OP = BWD_CONTRACT.op
BWD_AUX, BWD_VEC4 = 1, 2


def _expert_vec(name, v, e, ref):
    checks.tensor(name, v, (torch.float32,), ndim=1)
    if v.shape[0] != e or v.stride(0) != 1:
        raise ValueError(f"{name} must be a contiguous [{e}] fp32 tensor (one per expert), got {tuple(v.shape)}")
    checks.same_device(name, v, "logits", ref)


def check(logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor, ep_rank, scoring_func,
          mask, bias, image_bias, image_token_mask, fix_routing_mask, to_physical_map, logical_count,
          unmapped_topk_idx, force_random, out, scores):
    """Validate everything that needs no device work; returns (T, E, S, D)."""
    checks.tensor("logits", logits, (torch.float32,), ndim=2)
    t, e = logits.shape
    if t and not logits.is_contiguous():
        raise ValueError(f"logits must be contiguous, got strides {tuple(logits.stride())}")
    if not 4 <= e <= MAX_EXPERTS or e % 4:
        raise ValueError(f"logits.shape[1] (experts) must be a multiple of 4 in 4..{MAX_EXPERTS}, got {e}")
    if scoring_func != "sqrtsoftplus":
        raise ValueError(f"scoring_func must be 'sqrtsoftplus' (the only scoring of the 2.1 router), "
                         f"got {scoring_func!r}")
    checks.flag("use_shared_as_routed", use_shared_as_routed)
    _int("num_shared_experts", num_shared_experts, 0)
    s = num_shared_experts if use_shared_as_routed else 0
    if use_shared_as_routed and s not in (1, 2):
        raise ValueError(f"num_shared_experts must be 1 or 2 when use_shared_as_routed, got {num_shared_experts}")
    _int("num_topk", num_topk, 1, min(e, WARP - s))
    if not isinstance(routed_scaling_factor, (int, float)) or isinstance(routed_scaling_factor, bool):
        raise TypeError(f"routed_scaling_factor must be a float, got {routed_scaling_factor!r}")
    _int("ep_rank", ep_rank, 0, 2**31 - 1)
    for name, m in (("mask", mask), ("image_token_mask", image_token_mask), ("fix_routing_mask", fix_routing_mask),
                    ("force_random", force_random)):
        if m is not None:
            _token_mask(name, m, t, logits)
    if bias is not None:
        _expert_vec("bias", bias, e, logits)
    if (image_bias is None) != (image_token_mask is None):
        raise ValueError("image_bias and image_token_mask must be given together")
    if image_bias is not None:
        _expert_vec("image_bias", image_bias, e, logits)
    if fix_routing_mask is not None and unmapped_topk_idx is None:
        raise ValueError("fix_routing_mask needs unmapped_topk_idx (the fixed rows' experts)")
    _unmapped_idx(unmapped_topk_idx, t, num_topk, logits)
    d = _physical_map(to_physical_map, logical_count, e, s, logits)
    if scores is not None:
        checks.tensor("scores", scores, (torch.float32,), ndim=2)
        if tuple(scores.shape) != (t, e) or (t and not scores.is_contiguous()):
            raise ValueError(f"scores must be a contiguous [{t}, {e}] fp32 tensor, got {tuple(scores.shape)}")
        checks.same_device("scores", scores, "logits", logits)
    if out is not None:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError("out must be a (topk_idx, topk_weights) pair")
        for name, o, dt in (("out[0]", out[0], torch.int64), ("out[1]", out[1], torch.float32)):
            checks.tensor(name, o, (dt,), ndim=2)
            if tuple(o.shape) != (t, num_topk + s) or (t and not o.is_contiguous()):
                raise ValueError(f"{name} must be a contiguous [{t}, {num_topk + s}] tensor, got {tuple(o.shape)}")
            checks.same_device(name, o, "logits", logits)
    return t, e, s, d


def moe_topk_gate_forward(logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor, ep_rank,
                          scoring_func="sqrtsoftplus", mask=None, bias=None, image_bias=None, image_token_mask=None,
                          fix_routing_mask=None, to_physical_map=None, logical_count=None, unmapped_topk_idx=None,
                          force_random=None, out=None, scores=None):
    t, e, s, d = check(logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor, ep_rank,
                       scoring_func, mask, bias, image_bias, image_token_mask, fix_routing_mask, to_physical_map,
                       logical_count, unmapped_topk_idx, force_random, out, scores)
    device = logits.device
    if out is not None:
        idx, weights = out
    else:
        idx = torch.empty((t, num_topk + s), dtype=torch.int64, device=device)
        weights = torch.empty((t, num_topk + s), dtype=torch.float32, device=device)
    if t == 0:
        return idx, weights
    checks.cuda("logits", logits)
    dev = device.index
    _topk._raise_pending(dev)
    dummy = idx.data_ptr()  # stands in for absent optional buffers (never read: flags say so)
    flags = 0
    ptrs = []
    for bit, tensor in ((BIAS, bias), (IMAGE, image_bias), (IMAGE, image_token_mask), (MASK, mask),
                        (FIX, fix_routing_mask), (RANDOM, force_random), (MAP, to_physical_map),
                        (MAP, logical_count), (UNMAPPED, unmapped_topk_idx), (SCORES, scores)):
        if tensor is not None:
            flags |= bit
        ptrs.append(dummy if tensor is None else tensor.data_ptr())
    epl = experts_per_lane(e)
    if epl % 4 == 0 and logits.data_ptr() % 16 == 0:
        flags |= VEC4
    un_stride = unmapped_topk_idx.stride(0) if unmapped_topk_idx is not None else 0
    bias_p, ibias_p, imask_p, mask_p, fix_p, rand_p, map_p, cnt_p, un_p, sc_p = ptrs
    launch(CONTRACT, CONTRACT.key(experts_per_lane=epl), device,
           logits=logits.data_ptr(), bias=bias_p, image_bias=ibias_p, image_mask=imask_p, mask=mask_p, fix_mask=fix_p,
           rand_mask=rand_p, to_physical_map=map_p, logical_count=cnt_p, unmapped=un_p, scores=sc_p,
           topk_idx=idx.data_ptr(), topk_weights=weights.data_ptr(), err=_topk._flag(dev)[0].data_ptr(),
           num_tokens=t, num_experts=e, experts_div4=e // 4, num_topk=num_topk, num_shared=s,
           routed_scaling_factor=float(routed_scaling_factor), ep_rank=ep_rank, map_cols=d, num_logical=e + s,
           unmapped_stride=un_stride, flags=flags)
    if _topk._sync_checks[0] and not torch.cuda.is_current_stream_capturing():
        torch.cuda.current_stream(dev).synchronize()
        _topk._raise_pending(dev)
    return idx, weights


def check_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor, scoring_func, mask,
                   grad_scores_sum, out):
    checks.tensor("scores", scores, (torch.float32,), ndim=2)
    t, e = scores.shape
    if not 1 <= e <= MAX_EXPERTS:
        raise ValueError(f"scores.shape[1] (experts) must be in 1..{MAX_EXPERTS}, got {e}")
    if scoring_func != "sqrtsoftplus":
        raise ValueError(f"scoring_func must be 'sqrtsoftplus', got {scoring_func!r}")
    checks.tensor("topk_idx", topk_idx, (torch.int64,), ndim=2)
    k = topk_idx.shape[1]
    if topk_idx.shape[0] != t or not 1 <= k <= WARP:
        raise ValueError(f"topk_idx must be [{t}, K] with 1 <= K <= {WARP}, got {tuple(topk_idx.shape)}")
    for name, v in (("topk_weights", topk_weights), ("grad_topk_weights", grad_topk_weights)):
        checks.tensor(name, v, (torch.float32,), ndim=2)
        if tuple(v.shape) != (t, k):
            raise ValueError(f"{name} must be [{t}, {k}] fp32, got {tuple(v.shape)}")
        checks.same_device(name, v, "scores", scores)
    checks.same_device("topk_idx", topk_idx, "scores", scores)
    if not isinstance(routed_scaling_factor, (int, float)) or isinstance(routed_scaling_factor, bool):
        raise TypeError(f"routed_scaling_factor must be a float, got {routed_scaling_factor!r}")
    if (mask is None) != (grad_scores_sum is None):
        raise ValueError("mask and grad_scores_sum must be given together (the sequence-aux gradient)")
    if mask is not None:
        _token_mask("mask", mask, t, scores)
        checks.tensor("grad_scores_sum", grad_scores_sum, (torch.float32,), ndim=2)
        q = grad_scores_sum.shape[0]
        if grad_scores_sum.shape[1] != e or q < 1 or t % q:
            raise ValueError(f"grad_scores_sum must be [Q, {e}] with T ({t}) % Q == 0, got "
                             f"{tuple(grad_scores_sum.shape)}")
        checks.same_device("grad_scores_sum", grad_scores_sum, "scores", scores)
    if out is not None:
        checks.tensor("out", out, (torch.float32,), ndim=2)
        if tuple(out.shape) != (t, e):
            raise ValueError(f"out must be [{t}, {e}] fp32, got {tuple(out.shape)}")
        checks.same_device("out", out, "scores", scores)
    if t:  # the kernel addresses every [T, *] operand as a dense row-major array
        for name, v in (("scores", scores), ("topk_idx", topk_idx), ("topk_weights", topk_weights),
                        ("grad_topk_weights", grad_topk_weights), ("grad_scores_sum", grad_scores_sum), ("out", out)):
            if v is not None and not v.is_contiguous():
                raise ValueError(f"{name} must be contiguous, got strides {tuple(v.stride())}")
    return t, e


def moe_topk_gate_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor,
                           scoring_func="sqrtsoftplus", mask=None, grad_scores_sum=None, out=None):
    t, e = check_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor, scoring_func, mask,
                          grad_scores_sum, out)
    grad = out if out is not None else torch.empty((t, e), dtype=torch.float32, device=scores.device)
    if t == 0:
        return grad
    checks.cuda("scores", scores)
    flags = 0
    if mask is not None:
        flags |= BWD_AUX
    epl = experts_per_lane(e)
    if epl % 4 == 0 and e % 4 == 0 and scores.data_ptr() % 16 == 0 and grad.data_ptr() % 16 == 0:
        flags |= BWD_VEC4
    dummy = scores.data_ptr()  # stands in for the absent aux inputs (never read: the flag says so)
    launch(BWD_CONTRACT, BWD_CONTRACT.key(experts_per_lane=epl), scores.device,
           scores=scores.data_ptr(), topk_idx=topk_idx.data_ptr(), topk_weights=topk_weights.data_ptr(),
           grad_topk_weights=grad_topk_weights.data_ptr(), mask=dummy if mask is None else mask.data_ptr(),
           grad_scores_sum=dummy if mask is None else grad_scores_sum.data_ptr(), out=grad.data_ptr(),
           num_tokens=t, num_experts=e, experts_div4=e // 4, num_topk=topk_idx.shape[1],
           routed_scaling_factor=float(routed_scaling_factor),
           tokens_per_seq=t // grad_scores_sum.shape[0] if mask is not None else 1, flags=flags)
    return grad
