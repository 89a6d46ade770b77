"""Benchmark of the v1 mHC autograd layer (kernelkiln.modeling.mhc): mhc_pre forward + backward and mhc_post
forward + backward, each one autograd step.

  python benchmarks/bench_ops_mhc_layer.py --out results.json

Records at m = 4, 8192 tokens, H 4096 / 7168 (DeepSeek-V4's; repeat 20, post_mult 2.0, with a norm weight).
mhc_pre's backward fuses the residual gradient into the buffer mhc_post's backward leaves (the 1.0.0 protocol): a
zero buffer is planted before each backward, as mhc_post would have. Bytes = the residual-sized tensors each kernel
reads or writes once (the TF32 GEMM reads the residual in the forward and again in the backward; apply-mix's and
norm_fn's backward read and write the gradient buffer), plus the mixes and parameters. % of the copy ceiling
measured in the same run; timed by graph replay where capture takes an autograd step, else by CUDA events.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, event_time_us, start, write_results  # noqa: E402

M = 4
M3 = M * (M + 2)


def _record(name, shape, fn, moved, ceiling):
    try:
        return bandwidth_record(name, shape, fn, moved, ceiling)
    except RuntimeError as exc:  # graph capture refused the autograd step
        torch.cuda.synchronize()
        t = event_time_us(fn, calls=10, reps=9)
        bw = moved / (t * 1e-6) / 1e9
        rec = dict(name=name, params=shape, time_us=round(t, 2), bytes=moved, bandwidth_gbs=round(bw, 1),
                   pct_of_copy=round(100 * bw / ceiling, 1), timing="events", graph_error=str(exc)[:200])
        print(json.dumps(rec), flush=True)
        return rec


def _records(n, ceiling):
    from kernelkiln.modeling import mhc
    from kernelkiln.modeling.mhc.ops import _common
    out = []
    for h in (4096, 7168):
        shape = {"n": n, "m": M, "H": h}
        streams = n * M * h * 2  # one residual-sized bf16 tensor
        hidden = n * h * 2
        res = torch.randn(1, n, M, h, device="cuda").bfloat16().requires_grad_()
        fn = (torch.randn(M3, M * h, device="cuda") * 1e-4).requires_grad_()
        scale = (torch.randn(3, device="cuda") * 0.1).requires_grad_()
        base = (torch.randn(M3, device="cuda") * 0.1).requires_grad_()
        normw = (torch.randn(M * h, device="cuda") * 0.1 + 1).requires_grad_()
        g_li = torch.randn(1, n, h, device="cuda").bfloat16()
        g_post, g_comb = torch.randn(1, n, M, 1, device="cuda"), torch.randn(1, n, M, M, device="cuda")
        buffer = torch.zeros(res.shape, dtype=torch.bfloat16, device="cuda")

        def pre_step(res=res, fn=fn, scale=scale, base=base, normw=normw, g_li=g_li, g_post=g_post, g_comb=g_comb,
                     buffer=buffer):
            li, (post, comb) = mhc.mhc_pre(res, fn, scale, base, norm_weight=normw, post_mult_value=2.0,
                                           sinkhorn_repeat=20)
            _common.set_fused_buffer(res, buffer)
            torch.autograd.grad((li, post, comb), (fn, scale, base, normw), (g_li, g_post, g_comb))

        params = 4 * (M3 * M * h * 4 + M * h * 2)  # fn, normw and their merges / gradients, roughly
        mixes = n * (M3 * 4 + M * 4 + M * M * 4) * 4
        # forward: GEMM reads res, apply-mix reads res, writes li; backward: reads g_li, apply-mix reads res and
        # RMW buffer, GEMM backward reads res and RMW buffer
        moved = streams * (1 + 1 + 1 + 2 + 1 + 2) + hidden * 2 + params + mixes
        out.append(_record("mhc_pre_fwd_bwd", shape, pre_step, moved, ceiling))

        x = torch.randn(1, n, h, device="cuda").bfloat16().requires_grad_()
        post = (torch.sigmoid(torch.randn(1, n, M, 1, device="cuda")) * 2).requires_grad_()
        comb = torch.softmax(torch.randn(1, n, M, M, device="cuda"), -1).requires_grad_()
        d_o = torch.randn(1, n, M, h, device="cuda").bfloat16()

        def post_step(x=x, res=res, post=post, comb=comb, d_o=d_o):
            new = mhc.ops.mhc_post(x, res, post, comb)
            torch.autograd.grad(new, (x, res, post, comb), d_o)
            _common.clear_fused_buffer(res)

        # forward: reads x, res, writes new; backward: reads d_o, res, x, writes d_res, d_x
        moved = streams * 5 + hidden * 3 + 2 * n * (M + M * M) * 4 * 2
        out.append(_record("mhc_post_fwd_bwd", shape, post_step, moved, ceiling))
    return out


def main():
    args, ceiling = start(__doc__, tokens=8192)
    write_results(args.out, ceiling, _records(args.tokens, ceiling))


if __name__ == "__main__":
    main()
