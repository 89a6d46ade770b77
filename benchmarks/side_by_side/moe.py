"""Side-by-side cases of ``moe``: every public function of the peer's 2.1.0 ``tile_kernels.moe`` (all of them exist
in kernelkiln.moe). Routers: DeepSeek-V3 (256 experts, top-8, one shared expert, EPLB map), DeepSeek-V4 (384 experts,
top-6), Qwen3-MoE (128 experts, top-8) and Kimi-K2 (384 experts, top-8), at T = 16384 tokens.

Not covered: ``moe_topk_gate_forward(force_random=...)`` (an option, not an op: random routing from a Philox stream
seeded by ``ep_rank``, a load-test feature).
"""
from functools import partial

import torch

from .common import Calls, Case

RSF = 2.5  # routed_scaling_factor (DeepSeek-V3)


def _case(name, build, **params):
    """A case whose params are exactly its builder's keyword arguments."""
    return Case(name, params, partial(build, **params))


def _topk_gate(device, T, E, K):
    scores = torch.randn(T, E, device=device)
    return Calls(lambda m: m.moe.topk_gate(scores, K))


def _gate_forward(device, T, E, K, shared, bias, scores, mask, eplb, name="moe_topk_gate_forward"):
    """The fused 2.1 router; output buffers it writes (scores, unmapped indices) start from fixed values in the
    compared call, so rows an implementation leaves alone (masked tokens) compare equal."""
    logits = torch.randn(T, E, device=device)
    kw = {}
    if bias:
        kw["bias"] = torch.randn(E, device=device) * 0.1
    if mask:
        kw["mask"] = torch.rand(T, device=device) > 0.05
    if eplb:  # logical -> physical map of E + shared logical experts, up to 33 replicas each over E + 32 physical slots
        kw["to_physical_map"] = torch.randint(0, E + 32, (E + shared, 33), dtype=torch.int32, device=device)
        kw["logical_count"] = torch.randint(1, 34, (E + shared,), dtype=torch.int32, device=device)
    outs = {}
    if scores:
        outs["scores"] = torch.zeros(T, E, device=device)
    if eplb:
        outs["unmapped_topk_idx"] = torch.full((T, K), -2, dtype=torch.int64, device=device)

    def call(m, **bufs):
        return getattr(m.moe, name)(logits, K, shared > 0, shared, RSF, 0, **kw, **bufs)

    def once(m):  # fresh output buffers, compared with the op's result
        bufs = {k: v.clone() for k, v in outs.items()}
        return call(m, **bufs), tuple(bufs.values())

    return Calls(lambda m: call(m, **outs), once if outs else None)


def _gate_backward(device, T, E, K, seqs):
    """Inputs as the forward leaves them, made with torch: scores = sqrt(softplus(logits)), the top-K of
    scores + bias (-1 and weight 0 for masked tokens), weights = RSF * u_j / sum(u), and the aux-loss terms."""
    scores = torch.nn.functional.softplus(torch.randn(T, E, device=device)).sqrt()
    bias = torch.randn(E, device=device) * 0.1
    idx = torch.topk(scores + bias, K, dim=-1).indices
    u = scores.gather(1, idx)
    w = RSF * u / (u.sum(-1, keepdim=True) + 1e-20)
    mask = torch.rand(T, device=device) > 0.05
    idx = torch.where(mask[:, None], idx, -1)
    w = torch.where(mask[:, None], w, 0.0)
    grad_w = torch.randn(T, K, device=device)
    grad_sum = torch.randn(seqs, E, device=device)
    return Calls(lambda m: m.moe.moe_topk_gate_backward(scores, idx, w, grad_w, RSF, mask=mask,
                                                        grad_scores_sum=grad_sum))


def _normalize_weight(device, T, K):
    w = torch.rand(T, K, device=device)
    return Calls(lambda m: m.moe.normalize_weight(w))


def cases(quick=False):
    t = 256 if quick else 16384
    yield _case("moe.topk_gate", _topk_gate, T=t, E=256, K=8)
    yield _case("moe.topk_gate", _topk_gate, T=t, E=128, K=8)  # Qwen3-MoE
    yield _case("moe.moe_topk_gate_forward", _gate_forward, T=t, E=384, K=6, shared=0, bias=True, scores=True,
                mask=False, eplb=False)  # V4, training forward (saves the scores)
    yield _case("moe.moe_topk_gate_forward", _gate_forward, T=t, E=256, K=8, shared=1, bias=True, scores=False,
                mask=True, eplb=True)  # V3 serving: shared expert routed, padded tokens masked, EPLB replicas
    yield _case("moe.moe_topk_gate", partial(_gate_forward, name="moe_topk_gate"), T=t, E=384, K=8, shared=0,
                bias=True, scores=False, mask=False, eplb=False)  # Kimi-K2, through the v1 name
    yield _case("moe.moe_topk_gate_backward", _gate_backward, T=t, E=384, K=6, seqs=4)
    yield _case("moe.normalize_weight", _normalize_weight, T=t, K=8)
