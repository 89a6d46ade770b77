"""KernelKiln and the peer (tile_kernels 2.1.0) side by side in one process, on the same inputs.

  PYTHONPATH=<kernelkiln install>:<tile_kernels + tilelang install> python benchmarks/bench_side_by_side.py --out side.json

For every case both implement: the peer's first call (its JIT compile) and ours, whether the outputs are bitwise
equal (data, scales, indices; NaN compared by position), then the device time of each by CUDA-graph replay and the
ratio peer / ours (> 1: we are faster). Shapes: DeepSeek-V3/V4 (T = 16384, H = 7168, E = 256, K = 8, RoPE 128 x 64
interleaved with a key head), Qwen3-MoE (H = 4096, E = 128) and Kimi-K2 (E = 384).
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import graph_time_us  # noqa: E402


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    out = list(out)
    return [t for o in out for t in _flat(o)] if out else []


def _same(a, b):
    """Bitwise equal, NaNs by position (their payloads differ between implementations' casts)."""
    a, b = _flat(a), _flat(b)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if x.is_floating_point() and x.element_size() > 1:
            nx, ny = torch.isnan(x), torch.isnan(y)
            if not torch.equal(nx, ny) or not torch.equal(x[~nx].contiguous().view(torch.uint8),
                                                         y[~ny].contiguous().view(torch.uint8)):
                return False
        elif not torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)):
            return False
    return True


def _first_call_s(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def _cases():
    t = 16384
    for h in (7168, 4096):
        x = torch.randn(t, h, device="cuda").to(torch.bfloat16)
        for fmt, g in (("e4m3", 128), ("e2m1", 32)):
            for opts in ({}, {"round_sf": True, "use_packed_ue8m0": True, "use_tma_aligned_col_major_sf": True}):
                yield ("per_token_cast", {"T": t, "H": h, "fmt": fmt, "g": g, **opts},
                       lambda m, x=x, fmt=fmt, g=g, o=opts: m.quant.per_token_cast(x, fmt, g, **o))
    x = torch.randn(t, 7168, device="cuda").to(torch.bfloat16)
    yield ("per_block_cast", {"T": t, "H": 7168, "fmt": "e4m3", "block": [128, 128]},
           lambda m, x=x: m.quant.per_block_cast(x, "e4m3", (128, 128)))
    for e in (256, 128, 384):
        s = torch.randn(t, e, device="cuda")
        yield ("topk_gate", {"T": t, "E": e, "K": 8}, lambda m, s=s: m.moe.topk_gate(s, 8))
    ang = torch.rand(16384, 32, device="cuda") * 6.283
    cache = torch.cat((ang.cos(), ang.sin()), dim=1)
    q0 = torch.randn(t, 128, 64, device="cuda").to(torch.bfloat16)
    k0 = torch.randn(t, 1, 64, device="cuda").to(torch.bfloat16)
    pos = torch.randint(0, 16384, (t,), device="cuda", dtype=torch.int32)
    bufs = {}

    def rope(m):
        q, k = bufs.setdefault(("q", m.__name__), q0.clone()), bufs.setdefault(("k", m.__name__), k0.clone())
        m.transform.apply_rotary(q, cache, k, pos, True)
        return q, k

    def rope_once(m):  # the comparison: one rotation of fresh copies
        q, k = q0.clone(), k0.clone()
        m.transform.apply_rotary(q, cache, k, pos, True)
        return q, k

    yield ("apply_rotary", {"T": t, "heads": 128, "key_heads": 1, "D": 64, "interleaved": True}, rope, rope_once)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import tile_kernels as tk

    import kernelkiln as kk
    torch.manual_seed(0)
    records = []
    for name, params, fn, *compare in _cases():
        once = compare[0] if compare else fn
        peer_first, peer_out = _first_call_s(lambda: once(tk))
        ours_first, ours_out = _first_call_s(lambda: once(kk))
        rec = {"name": name, "params": params, "bitwise": _same(ours_out, peer_out),
               "first_call_s": {"peer": round(peer_first, 3), "ours": round(ours_first, 4)}}
        peer_us, ours_us = graph_time_us(lambda: fn(tk)), graph_time_us(lambda: fn(kk))
        rec.update(peer_us=round(peer_us, 2), ours_us=round(ours_us, 2), speedup=round(peer_us / ours_us, 3))
        print(json.dumps(rec), flush=True)
        records.append(rec)
    Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "tile_kernels": tk.__version__,
                                       "records": records}, indent=1) + "\n")


if __name__ == "__main__":
    main()
