"""topk_sum_and_topk_group_idx without a GPU: the reference against the spec, a lane-level model of the
kernel's algorithm against the reference, argument errors (raised before device work) and fake shapes."""
import math
import random

import pytest
import torch

import kernelkiln
from kernelkiln.torch import topk_sum_and_topk_group_idx as ref


def _spec(scores, num_topk_sum, k):
    """docs/SPEC.md §3.1 literally: group score = top-1 or top-2 sum; best first, ties to the lower group."""
    out = []
    for row in scores.tolist():
        gs = []
        for vals in row:
            top = sorted(vals, reverse=True)
            gs.append(top[0] if num_topk_sum == 1 else float(torch.tensor(top[0]) + torch.tensor(top[1])))
        out.append(sorted(range(len(gs)), key=lambda g: (-gs[g], g))[:k])
    return torch.tensor(out, dtype=torch.int64).reshape(len(out), k)


def _kernel_model(scores, num_topk_sum, k):
    """kernels/moe/topk_sum_group.py lane by lane: LPG lanes per group, strided reads, xor merges, ranks."""
    t, g, epg = scores.shape
    lpg_shift = (32 // g).bit_length() - 1
    lpg = 1 << lpg_shift
    vec4 = epg % 4 == 0
    out = torch.full((t, k), -1, dtype=torch.int64)
    for tok in range(t):
        m = [[-math.inf, -math.inf] for _ in range(32)]
        for lane in range(32):
            grp, sub = lane >> lpg_shift, lane & (lpg - 1)
            if grp >= g:
                continue
            if vec4:
                elems = [4 * c + j for c in range(sub, epg // 4, lpg) for j in range(4)]
            else:
                elems = list(range(sub, epg, lpg))
            for e in elems:
                v = scores[tok, grp, e].item()
                m[lane] = [max(m[lane][0], v), max(m[lane][1], min(m[lane][0], v))]
        for off in (16, 8, 4, 2, 1):
            if off < lpg:
                o = [m[lane ^ off] for lane in range(32)]
                m = [[max(a[0], b[0]), max(min(a[0], b[0]), max(a[1], b[1]))] for a, b in zip(m, o)]
        gs = [a[0] if num_topk_sum == 1 else float(torch.tensor(a[0]) + torch.tensor(a[1])) for a in m]  # fp32 add
        rank = [0] * 32
        for lane in range(32):
            my, sub = lane >> lpg_shift, lane & (lpg - 1)
            for gi in range((g + lpg - 1) >> lpg_shift):
                grp = (gi << lpg_shift) + sub
                other = gs[(grp << lpg_shift) & 31]
                if grp < g and (other > gs[lane] or (other == gs[lane] and grp < my)):
                    rank[lane] += 1
        for off in (16, 8, 4, 2, 1):
            if off < lpg:
                rank = [r + rank[lane ^ off] for lane, r in enumerate(rank)]
        for lane in range(32):
            if lane >> lpg_shift < g and lane & (lpg - 1) == 0 and rank[lane] < k:
                out[tok, rank[lane]] = lane >> lpg_shift
    return out


def _scores(t, g, epg, ties):
    x = torch.randn(t, g, epg)
    if ties:  # few distinct values: equal maxima inside groups and equal group scores across groups
        x = torch.randint(-3, 4, (t, g, epg)).float() * 0.5
    return x


@pytest.mark.parametrize("e,g", [(72, 4), (72, 8), (72, 12), (256, 4), (256, 8), (256, 16), (64, 32), (30, 3)])
@pytest.mark.parametrize("num_topk_sum", [1, 2])
@pytest.mark.parametrize("ties", [False, True])
def test_reference_and_kernel_model_match_spec(seed, e, g, num_topk_sum, ties):
    x = _scores(6, g, e // g, ties)
    k = random.choice([1, min(2, g), min(4, g), g])
    expect = _spec(x, num_topk_sum, k)
    assert torch.equal(ref(x, num_topk_sum, k), expect)
    assert torch.equal(_kernel_model(x, num_topk_sum, k), expect)


def _call(scores=None, num_topk_sum=2, num_topk_groups=4):
    scores = torch.randn(4, 8, 32) if scores is None else scores
    return kernelkiln.moe.topk_sum_and_topk_group_idx(scores, num_topk_sum, num_topk_groups)


@pytest.mark.parametrize("kw,exc,match", [
    (dict(scores=torch.randn(4, 8, 32, dtype=torch.bfloat16)), TypeError, "scores has dtype torch.bfloat16"),
    (dict(scores=torch.randn(4, 256)), ValueError, "scores must be 3-D"),
    (dict(scores=[[[1.0]]]), TypeError, "scores must be a torch.Tensor"),
    (dict(scores=torch.randn(4, 33, 2), num_topk_groups=1), ValueError, r"num_groups\) must be in 1..32, got 33"),
    (dict(scores=torch.randn(4, 8, 0)), ValueError, r"experts per group\) must be >= 1"),
    (dict(num_topk_sum=3), ValueError, "num_topk_sum must be 1 or 2"),
    (dict(num_topk_sum=0), ValueError, "num_topk_sum must be 1 or 2"),
    (dict(scores=torch.randn(4, 8, 1)), ValueError, r"num_topk_sum must be 1 or 2 and <= experts per group \(1\)"),
    (dict(num_topk_sum=2.0), TypeError, "num_topk_sum must be an int"),
    (dict(num_topk_groups=True), TypeError, "num_topk_groups must be an int"),
    (dict(num_topk_groups=0), ValueError, r"num_topk_groups must be in 1..8 \(num_groups\), got 0"),
    (dict(num_topk_groups=9), ValueError, r"num_topk_groups must be in 1..8"),
    (dict(scores=torch.randn(4, 32, 8).transpose(1, 2)), ValueError, "scores must be contiguous"),
])
def test_bad_inputs(kw, exc, match):
    with pytest.raises(exc, match=match):
        _call(**kw)


def test_valid_cpu_input_asks_for_cuda():
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        _call()


def test_zero_tokens_needs_no_device():
    out = _call(scores=torch.empty(0, 8, 32))
    assert out.shape == (0, 4) and out.dtype == torch.int64


def test_fake_tensor_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        out = torch.ops.kernelkiln.topk_sum_and_topk_group_idx(torch.empty(16, 8, 32, device="cuda"), 2, 4)
        assert out.shape == (16, 4) and out.dtype == torch.int64
        with pytest.raises(ValueError, match="num_topk_groups must be in"):
            torch.ops.kernelkiln.topk_sum_and_topk_group_idx(torch.empty(16, 8, 32, device="cuda"), 2, 9)
