"""CPU checks of v1 per_channel_cast_fused / FP8-input per_channel_cast: the reference against a literal
transcription of docs/SPEC.md §2.1, and argument errors (raised before any device work)."""
import pytest
import torch

from kernelkiln.quant import _per_channel
from kernelkiln.torch.quant_v1 import per_channel_cast_fused_ref


def _spec(data, sf, pos, round_sf):
    """§2.1 literally, element loops over 128-row blocks: amax of d*s (padding rows = 0), clamp 1e-4,
    sf = amax/448 (or 2^ceil(log2(amax*(1/448)))), q = e4m3(clamp(d * (s * sf_inv)))."""
    rows = pos.numel() if pos is not None else data.shape[0]
    h = data.shape[1]
    d = torch.zeros(rows, h)
    s = torch.zeros(rows, h)
    for n in range(rows):
        t = int(pos[n]) if pos is not None else n
        if t >= 0:
            d[n] = data[t].float()
            s[n] = sf[t].repeat_interleave(128) if sf is not None else 1.0
    q = torch.empty(rows, h, dtype=torch.float8_e4m3fn)
    out_sf = torch.empty(-(-rows // 128), h)
    for b in range(out_sf.shape[0]):
        blk = slice(b * 128, min(rows, b * 128 + 128))
        amax = (d[blk] * s[blk]).abs().amax(0).clamp(min=1e-4)
        if round_sf:
            bits = (amax * torch.tensor(1.0 / 448)).view(torch.int32)
            e = ((bits - 1) >> 23) + 1 - 127
            out_sf[b] = ((e + 127) << 23).view(torch.float32)
            inv = ((127 - e) << 23).view(torch.float32)
        else:
            out_sf[b] = amax / torch.tensor(448.0)
            inv = torch.tensor(448.0) / amax
        q[blk] = (d[blk] * (s[blk] * inv)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, out_sf


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("gather", [False, True])
@pytest.mark.parametrize("round_sf", [False, True])
def test_reference_matches_spec(seed, fp8, gather, round_sf):
    t, h = 200, 256
    x = (torch.randn(t, h) * torch.exp2(torch.randint(-8, 8, (1, h)).float())).to(torch.bfloat16)
    sf = None
    if fp8:
        sf = torch.exp2(torch.randint(-6, 6, (t, h // 128)).float())
        x = (x.float() * 10).clamp(-448, 448).to(torch.float8_e4m3fn)
    pos = None
    if gather:
        pos = torch.randint(-1, t, (272,), dtype=torch.int32)
    arg = (x, sf) if fp8 else x
    q, rsf = per_channel_cast_fused_ref(arg, "e4m3", 128, round_sf, 128 if fp8 else None, pos)
    eq, esf = _spec(x, sf, pos, round_sf)
    assert torch.equal(q.view(torch.uint8), eq.view(torch.uint8))
    assert torch.equal(rsf.view(torch.int32), esf.view(torch.int32))
    if gather:
        assert (q[pos < 0].view(torch.uint8) == 0).all()


def _x(t=256, h=256):
    return torch.zeros(t, h, dtype=torch.bfloat16)


def _fp8(t=256, h=256, g=128):
    return torch.zeros(t, h, dtype=torch.float8_e4m3fn), torch.ones(t, h // g)


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(x=_x().float()), TypeError, "x"),
    (dict(fmt="e2m1"), ValueError, "fmt"),
    (dict(num_per_tokens=32), ValueError, "num_per_tokens"),
    (dict(num_per_tokens=128.0), TypeError, "num_per_tokens"),
    (dict(num_per_channels=128), ValueError, "num_per_channels"),
    (dict(x=_fp8()), TypeError, "num_per_channels"),
    (dict(x=_fp8(g=32), num_per_channels=32), ValueError, "num_per_channels"),
    (dict(x=(_fp8()[0], torch.ones(256, 3)), num_per_channels=128), ValueError, "x[1] (sf)"),
    (dict(x=_x(256, 192)), ValueError, "H % 128"),
    (dict(pos_to_token=torch.zeros(20, dtype=torch.int32)), ValueError, "N % 16"),
    (dict(pos_to_token=torch.zeros(32, dtype=torch.int64)), TypeError, "pos_to_token"),
    (dict(round_sf=1), TypeError, "round_sf"),
])
def test_fused_errors(kwargs, exc, words):
    args = dict(x=_x(), fmt="e4m3", num_per_tokens=128, round_sf=False, num_per_channels=None, pos_to_token=None)
    args.update(kwargs)
    with pytest.raises(exc) as info:
        _per_channel.per_channel_cast_fused(**args)
    assert words in str(info.value)


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(x=_fp8()), TypeError, "num_per_channels"),
    (dict(x=_fp8(), num_per_channels=64), ValueError, "num_per_channels"),
    (dict(x=(_fp8()[0], torch.ones(256, 1)), num_per_channels=128), ValueError, "x[1] (sf)"),
    (dict(x=(_fp8()[0], torch.ones(256, 2, dtype=torch.float64)), num_per_channels=128), TypeError, "x[1] (sf)"),
    (dict(x=(_fp8()[0].float(), torch.ones(256, 2)), num_per_channels=128), TypeError, "x[0] (data)"),
])
def test_fp8_per_channel_cast_errors(kwargs, exc, words):
    args = dict(x=_x(), fmt="e4m3", num_per_tokens=128, round_sf=False, num_per_channels=None,
                use_packed_ue8m0=False)
    args.update(kwargs)
    with pytest.raises(exc) as info:
        _per_channel.per_channel_cast(**args)
    assert words in str(info.value)


def test_fp8_col_major_sf_passes_checks():
    data, sf = _fp8(256, 256, 32)
    col = torch.zeros(8, 260).T[:256]  # TMA-style column-major, token-sliced
    assert _per_channel.check_args((data, col), "e4m3", 128, False, 32, False)[1] is col
    del sf
