"""Benchmark of the mHC stream ops: expand fwd/bwd, pre_apply_mix fwd/bwd, post fwd/bwd, multilayer recompute.

  python benchmarks/bench_ops_mhc_streams.py --out results.json

Records at m = 4 (DeepSeek-V4): expand, pre_apply_mix and post at 8192 tokens and H 2560 / 4096 / 7168;
multilayer recompute at 8192 tokens, H 4096, (L, L_post) = (10, 9) and (10, 10), beside the unfused chain of
pre_apply_mix_fwd + post_fwd calls it replaces. Bytes = every input read and every output written once
(pre_apply_mix_bwd reads and writes x_grad); % of the copy ceiling measured in the same run. The multilayer op
copies its address table from pinned host memory per call: it is timed by graph replay where capture takes it,
else by CUDA events around eager calls (the record says which).
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, event_time_us, start, write_results  # noqa: E402

M_STREAMS = 4


def _bf(*shape):
    return torch.randn(shape, device="cuda").bfloat16()


def _stream_records(mhc, n, ceiling):
    out, m = [], M_STREAMS
    for h in (2560, 4096, 7168):
        shape = {"n": n, "m": m, "H": h}
        x, xs, o, ost = _bf(n, h), _bf(n, m, h), _bf(n, h), _bf(n, m, h)
        mix = torch.softmax(torch.randn(n, m, device="cuda"), -1)
        e = 2  # bytes per bf16
        out.append(bandwidth_record("expand_to_mhc_fwd", shape, lambda x=x, ost=ost: mhc.expand_to_mhc_fwd(x, ost),
                                    n * h * e * (1 + m), ceiling))
        out.append(bandwidth_record("expand_to_mhc_bwd", shape, lambda ost=ost, o=o: mhc.expand_to_mhc_bwd(ost, o),
                                    n * h * e * (m + 1), ceiling))
        out.append(bandwidth_record("mhc_pre_apply_mix_fwd", shape,
                                    lambda xs=xs, mix=mix, o=o: mhc.mhc_pre_apply_mix_fwd(xs, mix, o),
                                    n * h * e * (m + 1) + n * m * 4, ceiling))
        xg = _bf(n, m, h)
        out.append(bandwidth_record("mhc_pre_apply_mix_bwd", shape,
                                    lambda o=o, xs=xs, mix=mix, xg=xg: mhc.mhc_pre_apply_mix_bwd(o, xs, mix, xg),
                                    n * h * e * (1 + 3 * m) + 2 * n * m * 4, ceiling))
        xb, res = x.view(1, n, h), xs.view(1, n, m, h)
        post = torch.sigmoid(torch.randn(1, n, m, 1, device="cuda")) * 2
        comb = torch.softmax(torch.randn(1, n, m, m, device="cuda"), -1)
        dst = ost.view(1, n, m, h)
        out.append(bandwidth_record("mhc_post_fwd", shape,
                                    lambda xb=xb, res=res, post=post, comb=comb, dst=dst: mhc.mhc_post_fwd(
                                        xb, res, post, comb, out=dst),
                                    n * h * e * (1 + 2 * m) + n * (m + m * m) * 4, ceiling))
        d_o = _bf(1, n, m, h)
        out.append(bandwidth_record("mhc_post_bwd", shape,
                                    lambda xb=xb, res=res, post=post, comb=comb, d_o=d_o: mhc.mhc_post_bwd(
                                        xb, res, post, comb, d_o),
                                    n * h * e * (3 * m + 2) + 2 * n * (m + m * m) * 4, ceiling))
    return out


def _multilayer_records(mhc, n, ceiling):
    out, m, h = [], M_STREAMS, 4096
    for layers, posts in ((10, 9), (10, 10)):
        r0 = _bf(n, m, h)
        pre = [torch.sigmoid(torch.randn(n, m, device="cuda")) for _ in range(layers)]
        lo = [_bf(n, h) for _ in range(posts)]
        post = [torch.sigmoid(torch.randn(n, m, device="cuda")) * 2 for _ in range(posts)]
        comb = [torch.softmax(torch.randn(n, m, m, device="cuda"), -1) for _ in range(posts)]
        li = [_bf(n, h) for _ in range(layers)]
        rl = [_bf(n, m, h) for _ in range(posts)]
        shape = {"n": n, "m": m, "H": h, "L": layers, "L_post": posts}
        moved = (n * m * h * 2 + layers * (n * m * 4 + n * h * 2)
                 + posts * (n * h * 2 + n * (m + m * m) * 4 + n * m * h * 2))

        def fused(r0=r0, pre=pre, lo=lo, post=post, comb=comb, li=li, rl=rl):
            mhc.mhc_multilayer_recompute(r0, pre, lo, post, comb, li, rl)

        def chain(r0=r0, pre=pre, lo=lo, post=post, comb=comb, li=li, rl=rl, layers=layers, posts=posts):
            r = r0
            for i in range(layers):
                mhc.mhc_pre_apply_mix_fwd(r, pre[i], li[i])
                if i < posts:
                    mhc.mhc_post_fwd(lo[i].view(1, n, h), r.view(1, n, m, h), post[i].view(1, n, m, 1),
                                     comb[i].view(1, n, m, m), out=rl[i].view(1, n, m, h))
                    r = rl[i]

        try:
            rec = bandwidth_record("mhc_multilayer_recompute", shape, fused, moved, ceiling, timing="graph")
        except RuntimeError as exc:  # capture refused the pinned-memory table copy
            torch.cuda.synchronize()
            t = event_time_us(fused)
            bw = moved / (t * 1e-6) / 1e9
            rec = dict(name="mhc_multilayer_recompute", params=shape, time_us=round(t, 2), bytes=moved,
                       bandwidth_gbs=round(bw, 1), pct_of_copy=round(100 * bw / ceiling, 1), timing="events",
                       graph_error=str(exc)[:200])
            print(json.dumps(rec), flush=True)
        out.append(rec)
        # the chain moves the residual once more per layer (written, then read back)
        out.append(bandwidth_record("mhc_multilayer_chain", shape, chain, moved + posts * n * m * h * 2, ceiling))
    return out


def main():
    import kernelkiln
    args, ceiling = start(__doc__, tokens=8192)
    mhc = kernelkiln.mhc
    records = _stream_records(mhc, args.tokens, ceiling) + _multilayer_records(mhc, args.tokens, ceiling)
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
