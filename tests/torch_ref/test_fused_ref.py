"""CPU checks of the dispatch/combine references (kernelkiln.torch.fused)."""
import random
import struct
from fractions import Fraction

import pytest
import torch

from kernelkiln.torch import fused


def _peer_mapping(topk_idx, num_experts, n, alignment, num_sms):
    """Literal emulation of the peer kernel: per-warp chunks, 32-lane rounds, match_any ranks."""
    t, k = topk_idx.shape
    flat = topk_idx.reshape(-1).tolist()
    numel = t * k
    th = fused.fused_mapping_threads(num_experts)
    warps = num_sms * (th // 32)
    chunk = fused.fused_mapping_chunk(numel, num_experts, num_sms) if numel else 0
    ok = [0 <= e < num_experts for e in flat]
    counts = [0] * num_experts
    for e, v in zip(flat, ok):
        counts[e] += v
    aligned = [(c + alignment - 1) // alignment * alignment for c in counts]
    start = [sum(aligned[:e]) for e in range(num_experts)]
    seen = list(start)
    end_of_warp = []
    for w in range(warps):
        for i in range(min(w * chunk, numel), min((w + 1) * chunk, numel)):
            if ok[i]:
                seen[flat[i]] += 1
        end_of_warp.append(list(seen))
    t2p = [-1] * numel
    p2e, p2t, p2tk = [-1] * n, [-1] * n, [-1] * n
    for w in range(warps):
        lo, hi = min(w * chunk, numel), min((w + 1) * chunk, numel)
        cur = end_of_warp[w]
        for r0 in range(lo, hi, 32):
            keys = [flat[i] if i < hi and ok[i] else -1 for i in range(r0, r0 + 32)]
            new = dict()
            for lane, key in enumerate(keys):
                if key < 0:
                    continue
                rank = sum(1 for j in range(lane + 1) if keys[j] == key)
                pos = cur[key] - rank
                new[key] = pos
                i = r0 + lane
                t2p[i] = pos
                if pos < n:
                    p2e[pos], p2t[pos], p2tk[pos] = key, i // k, i
            for key, pos in new.items():
                cur[key] = pos
    return p2e, p2t, p2tk, t2p, start, [s + a for s, a in zip(start, aligned)], aligned


@pytest.mark.parametrize("t,k,e,align,sms", [(37, 8, 9, 64, 3), (200, 6, 32, 128, 2), (64, 8, 256, 128, 5),
                                             (1, 8, 4, 128, 132), (300, 2, 300, 16, 1), (0, 8, 8, 128, 4),
                                             (513, 9, 8, 128, 132)])
def test_mapping_matches_peer_algorithm(t, k, e, align, sms, seed):
    del seed
    idx = torch.randint(-1, e, (t, k), dtype=torch.int64)
    if t > 4:
        idx[:4] = e - 1  # a crowded expert spans several rounds and chunks
    n = (t * k + (align - 1) * e + align - 1) // align * align
    got = fused.get_fused_mapping(idx, e, n, align, num_sms=sms)
    want = _peer_mapping(idx, e, n, align, sms)
    for g, w in zip(got[:7], want):
        assert g.dtype == torch.int32
        assert g.reshape(-1).tolist() == list(w)
    assert got[7] == []


def test_mapping_sync_trims_and_lists_counts():
    idx = torch.tensor([[0, 1], [1, -1], [7, 1]])
    p2e, p2t, p2tk, t2p, start, end, cnt, listed = fused.get_fused_mapping(idx, 8, 0, 4, num_sms=1)
    assert listed == [4, 4, 0, 0, 0, 0, 0, 4] and p2e.numel() == 12
    assert start.tolist() == [0, 4, 8, 8, 8, 8, 8, 8] and end.tolist() == [4, 8, 8, 8, 8, 8, 8, 12]
    # one chunk of 32: descending flat order inside it, so token 2's expert-1 slot comes first
    assert p2e.tolist() == [0, -1, -1, -1, 1, 1, 1, -1, 7, -1, -1, -1]
    assert p2tk.tolist()[4:7] == [5, 2, 1] and p2t.tolist()[4:7] == [2, 1, 0]
    assert t2p.tolist() == [[0, 6], [5, -1], [8, 4]]
    forced = fused.get_fused_mapping(idx, 8, 0, 4, force_no_sync=True, num_sms=1)
    assert forced[0].numel() == 0 and forced[7] == []


def test_mapping_ignores_out_of_range_ids():
    idx = torch.tensor([[0, 9, -5, 1]])
    out = fused.get_fused_mapping(idx, 4, 8, 4, num_sms=1)
    assert out[3].tolist() == [[0, -1, -1, 4]]


def _f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def _round_f32(q):
    """Correctly rounded fp32 of a Fraction (RNE)."""
    f = torch.tensor(float(q), dtype=torch.float64).float()
    cands = [f, torch.nextafter(f, torch.tensor(float("inf"))), torch.nextafter(f, torch.tensor(float("-inf")))]
    best = min(cands, key=lambda c: (abs(Fraction(c.item()) - q),
                                     torch.tensor([c.item()], dtype=torch.float32).view(torch.int32).item() & 1))
    return best.item()


def test_fma_is_correctly_rounded_including_double_rounding_traps():
    rng = random.Random(1)
    a, b, c = [], [], []
    for _ in range(3000):
        # near-tie sums: c around 1, a*b around half an ulp of c, plus random junk
        a.append(_f32(2.0**-24 * (1 + rng.randrange(1 << 23) * 2.0**-23)))
        b.append(_f32(rng.choice([1.0, 1 - 2.0**-24, 1 + 2.0**-23]) * rng.choice([1, -1])))
        c.append(_f32(rng.choice([1.0, -1.0, 1 + 2.0**-23, 3.0])))
    for _ in range(3000):
        a.append(_f32(rng.uniform(-4, 4)))
        b.append(_f32(rng.uniform(-4, 4)))
        c.append(_f32(rng.uniform(-4, 4)))
    # exact 2**24 + 3 - 2**-46: float64 rounds to the fp32 midpoint 2**24 + 3, which ties up to 2**24 + 4
    a[0], b[0], c[0] = 1 + 2.0**-23, 1 - 2.0**-23, 2.0**24 + 2
    ta, tb, tc = (torch.tensor(v, dtype=torch.float32) for v in (a, b, c))
    got = fused.fma_f32(ta, tb, tc).tolist()
    want = [_round_f32(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a, b, c)]
    assert got == want
    naive = (ta.double() * tb.double() + tc.double()).float().tolist()
    assert naive != want  # the set really contains double-rounding cases


def test_expand_and_reduce_roundtrip():
    torch.manual_seed(0)
    t, k, e, h = 20, 4, 8, 256
    idx = torch.stack([torch.randperm(e)[:k] for _ in range(t)])
    idx[3, 1] = -1
    p2e, _, _, t2p, *_ = fused.get_fused_mapping(idx, e, 0, 8, num_sms=2)
    x = torch.randn(t, h).bfloat16()
    ex = fused.expand_to_fused(x, t2p, p2e)
    assert torch.equal(ex[p2e < 0].float(), torch.zeros_like(ex[p2e < 0].float()))
    w = torch.rand(t, k)
    y = fused.reduce_fused(ex, w, t2p)
    acc = torch.zeros(t, h)
    for j in range(k):
        ok = t2p[:, j] >= 0
        acc[ok] = fused.fma_f32(x[ok].float(), w[ok, j:j + 1], acc[ok])
    assert torch.equal(y, acc.bfloat16())
    sf = torch.tensor([0.5])
    xs = torch.rand(ex.shape[0]) + 0.5
    y8 = fused.reduce_fused((ex, xs), None, t2p, "e4m3", sf)
    assert y8.dtype == torch.float8_e4m3fn


def test_expand_with_sf_layouts():
    t, k, e = 6, 2, 4
    idx = torch.tensor([[0, 1], [1, 2], [3, 0], [2, 3], [0, -1], [1, 0]])
    p2e, _, _, t2p, *_ = fused.get_fused_mapping(idx, e, 0, 4, num_sms=1)
    data = torch.randn(t, 256).to(torch.float8_e4m3fn)
    sf = torch.rand(t, 2)
    out, out_sf = fused.expand_to_fused_with_sf((data, sf), 128, t2p, p2e)
    out_c, out_sf_c = fused.expand_to_fused_with_sf((data, sf), 128, t2p, p2e, True)
    assert out_sf_c.stride(0) == 1 and torch.equal(out_sf, out_sf_c)
    for tok in range(t):
        for j in range(k):
            p = t2p[tok, j].item()
            if p >= 0:
                assert torch.equal(out_sf[p], sf[tok]) and torch.equal(out[p].view(torch.uint8),
                                                                       data[tok].view(torch.uint8))
