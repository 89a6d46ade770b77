"""Tuning sweep of engram_gate_fwd's two launch-time knobs, on the installed wheel (no rebuild):

* CTAs per SM: the persistent-block count P is a kernel argument (the result does not depend on it, which the
  sweep checks bit for bit against the default P), so fewer CTAs per SM than the shared memory allows can be tried;
* the shared-memory carveout (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT): with fewer CTAs per SM, a
  smaller carveout leaves more L1 for the fused weight rows, which every token of a CTA reads again.

    python benchmarks/bench_engram_gate_sweep.py --out sweep.json

T = 8192, hc 4, H in {4096, 2560, 7168}, save_for_backward=False (the issue's target case); bytes as in
bench_ops_engram_gate.py; % of the copy ceiling measured in the same run.
"""
import gc
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402

CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
CTAS_PER_SM = (17, 16, 12, 10, 8, 6, 4)
CARVEOUTS = (-1, 100, 50, 25)  # percent of the unified L1/shared; -1: the driver's choice (the wheel's default)


def _gate_fwd_kernels():
    from kernelkiln._runtime.launcher import DeviceKernel
    return [o for o in gc.get_objects() if isinstance(o, DeviceKernel) and "engram_gate_fwd" in o.symbol]


def _set_carveout(pct):
    from kernelkiln._runtime import driver as drv
    d = drv.get_driver()
    for k in _gate_fwd_kernels():
        d.check(d.cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, pct),
                "setting the shared-memory carveout")


def main():
    import kernelkiln
    from kernelkiln.engram import _engram_gate_fwd as fwd
    from kernelkiln.engram import engram_gate_fwd
    args, ceiling = start(__doc__, tokens=8192)
    t, hc, eps, clamp = args.tokens, 4, 1e-20, 1e-6
    num_sms = kernelkiln.config.get_num_sms()
    default_blocks = fwd.gate_fwd_num_blocks
    records = []
    for h in (4096, 2560, 7168):
        x = torch.randn(t, hc, h, device="cuda").to(torch.bfloat16)
        kv = torch.randn(t, hc + 1, h, device="cuda").to(torch.bfloat16)
        wf = torch.randn(hc, h, device="cuda").to(torch.bfloat16).float()
        ref = engram_gate_fwd(x, kv, wf, eps, clamp, True)
        engram_gate_fwd(x, kv, wf, eps, clamp, False)  # both variants loaded before their carveout is set
        moved = nbytes(x, kv, wf) + nbytes(x)
        for per_sm in CTAS_PER_SM:
            fwd.gate_fwd_num_blocks = lambda sms, hc_mult, per_sm=per_sm: max(1, sms * per_sm // hc_mult)
            for pct in CARVEOUTS:
                _set_carveout(pct)
                out = engram_gate_fwd(x, kv, wf, eps, clamp, True)
                same = all(torch.equal(a.view(torch.int32) if a.dtype == torch.float32 else a.view(torch.int16),
                                       b.view(torch.int32) if b.dtype == torch.float32 else b.view(torch.int16))
                           for a, b in zip(out, ref))
                records.append(bandwidth_record(
                    "engram_gate_fwd", {"T": t, "hc": hc, "H": h, "save_for_backward": False, "ctas_per_sm": per_sm,
                                        "num_blocks": num_sms * per_sm // hc, "carveout_pct": pct},
                    lambda: engram_gate_fwd(x, kv, wf, eps, clamp, False), moved, ceiling, bitwise_equal=same))
        fwd.gate_fwd_num_blocks = default_blocks
        _set_carveout(-1)
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
