"""Every result of the mHC side-by-side cases against tile_kernels 2.1's kernels, not only the first that differs
(bench_side_by_side.py stops at the first): per result, how many elements differ, the largest |difference| and
the largest difference in fp32 ulps. Same inputs and cases as benchmarks/side_by_side/mhc.py.

Needs both packages importable (scripts/gpu_side_by_side.sh device sets PYTHONPATH):
    python3 scripts/diag_mhc_bitwise.py [name-substring ...]
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from side_by_side import mhc  # noqa: E402


def _flat(r):
    if isinstance(r, (list, tuple)):
        return [t for x in r for t in _flat(x)]
    return [r]


def _ulps(x, y):
    """Largest distance in units of the last place (the two as ordered integers), over elements not both NaN."""
    if x.dtype not in (torch.float32, torch.bfloat16):
        return None
    it = torch.int32 if x.dtype == torch.float32 else torch.int16
    a, b = x.contiguous().view(it).long(), y.contiguous().view(it).long()
    top = 1 << (31 if x.dtype == torch.float32 else 15)
    a = torch.where(a < 0, -(a + top), a)  # sign-magnitude -> ordered (both zeros at 0)
    b = torch.where(b < 0, -(b + top), b)
    keep = ~(torch.isnan(x) & torch.isnan(y))
    d = (a - b).abs()[keep]
    return int(d.max()) if d.numel() else 0


def main():
    import tile_kernels

    import kernelkiln

    wanted = sys.argv[1:]
    device = torch.device("cuda")
    rows = []
    for case in mhc.cases():
        if wanted and not any(w in case.name for w in wanted):
            continue
        torch.manual_seed(0)
        calls = case.build(device)
        once = calls.compare_call()
        ours, peer = _flat(once(kernelkiln)), _flat(once(tile_kernels))
        torch.cuda.synchronize()
        for i, (x, y) in enumerate(zip(ours, peer)):
            if not isinstance(x, torch.Tensor):
                continue
            same_nan = torch.isnan(x) & torch.isnan(y) if x.is_floating_point() else torch.zeros_like(x, dtype=torch.bool)
            bx = x.contiguous().view(torch.uint8).view(-1, x.element_size())
            by = y.contiguous().view(torch.uint8).view(-1, y.element_size())
            differ = ((bx != by).any(-1) & ~same_nan.reshape(-1))
            rec = {"op": case.name, "params": case.params, "result": i, "numel": x.numel(),
                   "differ": int(differ.sum()), "max_abs": float((x.double() - y.double()).abs()[~same_nan].max())
                   if x.numel() else 0.0, "max_ulps": _ulps(x, y)}
            rows.append(rec)
            print(json.dumps(rec), flush=True)
    eq = sum(r["differ"] == 0 for r in rows)
    print(f"{eq} of {len(rows)} results bitwise equal", flush=True)


if __name__ == "__main__":
    main()
