"""The peer's own rope reference (tile_kernels 2.1.0's torch/rope.py, loaded by path from its wheel, never copied)
against ours, byte for byte: rotary_embedding_ref is the peer's, and apply_rotary_ref agrees with it to fp32
rounding."""
import importlib.util

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelkiln.torch import apply_rotary_ref, rotary_embedding_ref


@pytest.fixture(scope="module")
def peer_rope(peer_wheel):
    path = peer_wheel("2.1.0") / "tile_kernels" / "torch" / "rope.py"
    spec = importlib.util.spec_from_file_location("peer_rope", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # imports torch only
    return mod.rotary_embedding_ref


def _bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


SPECIALS = [None, float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 3e38, 1e-40]


@settings(max_examples=80, deadline=None)
@given(four_d=st.booleans(), b=st.integers(1, 3), s=st.integers(1, 33), heads=st.integers(1, 5),
       d=st.sampled_from([32, 64, 128]), extra=st.sampled_from([0, 32]), dtype=st.sampled_from(["bf16", "fp32"]),
       interleaved=st.booleans(), conjugate=st.booleans(), with_positions=st.booleans(), offset=st.integers(0, 7),
       special=st.sampled_from(SPECIALS), seed=st.integers(0, 2**16))
def test_our_peer_reference_is_the_peers(peer_rope, four_d, b, s, heads, d, extra, dtype, interleaved, conjugate,
                                         with_positions, offset, special, seed):
    g = torch.Generator().manual_seed(seed)
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    shape = (b, s, heads, d + extra) if four_d else (s, heads, d + extra)
    x = (torch.randn(shape, generator=g) * 3).to(dt)
    if special is not None:
        x.view(-1)[seed % x.numel()] = special
    rows = s + offset + 8
    ang = torch.rand(rows, d // 2, generator=g) * 6.283
    cos, sin = ang.cos(), ang.sin()
    positions = None
    if with_positions:
        positions = torch.randint(0, rows - offset, (b, s) if four_d else (s,), generator=g)
    want = peer_rope(x, cos, sin, positions, offset, interleaved, conjugate)
    got = rotary_embedding_ref(x, cos, sin, positions, offset, interleaved, conjugate)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(_bits(got), _bits(want))
    if extra == 0 and special is None:  # the kernel's fma form: within fp32 rounding of the peer's
        fused, _ = apply_rotary_ref(x, torch.cat((cos, sin), 1), None, positions, interleaved, conjugate, offset)
        assert torch.allclose(fused.float(), want.float(), rtol=2e-2 if dt == torch.bfloat16 else 1e-5, atol=1e-5)
