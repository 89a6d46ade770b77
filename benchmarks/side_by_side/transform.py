"""Side-by-side cases of ``transform``: ``apply_rotary``, the only public function of the peer's 2.1.0
``tile_kernels.transform`` (kernelkiln.transform has it). Shapes: DeepSeek-V3/V4 MLA decoupled RoPE (128 query heads
and one shared key head of rope dim 64, interleaved pairs) and Qwen3-MoE attention (64 query heads, 4 KV heads, head
dim 128, NeoX halves), at T = 16384 tokens with positions into a 16384-row cos/sin cache.
"""
from functools import partial

import torch

from .common import Calls, Case

CACHE_ROWS = 16384


def _case(name, build, **params):
    """A case whose params are exactly its builder's keyword arguments."""
    return Case(name, params, partial(build, **params))


def _rotary(device, T, heads, key_heads, D, interleaved, positions):
    ang = torch.rand(CACHE_ROWS, D // 2, device=device) * 6.283
    cache = torch.cat((ang.cos(), ang.sin()), dim=1)  # [rows, D] fp32: cos halves, then sin halves
    q0 = torch.randn(T, heads, D, device=device).to(torch.bfloat16)
    k0 = torch.randn(T, key_heads, D, device=device).to(torch.bfloat16)
    pos = torch.randint(0, CACHE_ROWS, (T,), device=device, dtype=getattr(torch, positions))
    # The op rotates in place: the timed replays keep rotating these buffers (the time does not depend on the values)
    q, k = q0.clone(), k0.clone()

    def once(m):  # one rotation of fresh copies, returned because the op returns nothing
        qc, kc = q0.clone(), k0.clone()
        m.transform.apply_rotary(qc, cache, kc, pos, interleaved)
        return qc, kc

    return Calls(lambda m: m.transform.apply_rotary(q, cache, k, pos, interleaved), once)


def cases(quick=False):
    t = 256 if quick else 16384
    yield _case("transform.apply_rotary", _rotary, T=t, heads=128, key_heads=1, D=64, interleaved=True,
                positions="int32")
    yield _case("transform.apply_rotary", _rotary, T=t, heads=64, key_heads=4, D=128, interleaved=False,
                positions="int64")
