"""Where mhc_pre_norm_fn_fwd_mul differs from itself and from its ordered reference (the H200 run of eaa11d0 found
both): the same inputs N times, then which tokens (and so which CTAs, 32 tokens each), columns and stores differ.

    KERNELKILN_KERNEL_DIR=<store> python3 scripts/diag_norm_fn.py [n] [K] [reps]
    compute-sanitizer --tool racecheck python3 scripts/diag_norm_fn.py 256 1024 1
"""
import sys

import torch

from kernelkiln.mhc import mhc_pre_norm_fn_fwd_mul
from kernelkiln.torch.mhc_norm_fn import sqrsum_ordered_ref


def run(x, fn):
    n, m3 = x.shape[0], fn.shape[0]
    out = torch.full((n, 1, m3), float("nan"), device="cuda")
    sq = torch.full((n, 1), float("nan"), device="cuda")
    mhc_pre_norm_fn_fwd_mul(x, fn, out, sq)
    return out.view(n, m3), sq.view(n)


def where(a, b, what):
    bad = (a.view(torch.int32) != b.view(torch.int32))
    if bad.dim() == 1:
        bad = bad.unsqueeze(1)
    rows = bad.any(1).nonzero().flatten()
    cols = bad.any(0).nonzero().flatten()
    ctas = sorted({int(r) // 32 for r in rows})
    print(f"  {what}: {int(bad.sum())} values differ in {len(rows)} tokens (CTAs {ctas[:12]}{'...' if len(ctas) > 12 else ''}"
          f", {len(ctas)} of {(a.shape[0] + 31) // 32}), columns {cols.tolist()[:32]}, token % 32: "
          f"{sorted({int(r) % 32 for r in rows})}")


def main():
    n, k, reps = (int(v) for v in (sys.argv[1:] + ["4096", "10240", "20"])[:3])
    torch.manual_seed(0)
    x = torch.randn(n, k, device="cuda").bfloat16()
    fn = (torch.randn(24, k, device="cuda") * 1e-4)
    fn = (fn.view(torch.int32) & ~0x1FFF).view(torch.float32)  # TF32 values, as the layer passes them
    first = run(x, fn)
    ref = sqrsum_ordered_ref(x)
    print(f"n={n} K={k}: sqrsum vs ordered reference")
    where(first[1], ref, "sqrsum vs ref")
    for i in range(1, reps):
        again = run(x, fn)
        if not (torch.equal(again[0].view(torch.int32), first[0].view(torch.int32))
                and torch.equal(again[1].view(torch.int32), first[1].view(torch.int32))):
            print(f"run {i} differs from run 0:")
            where(again[0], first[0], "out_mul")
            where(again[1], first[1], "sqrsum")
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
