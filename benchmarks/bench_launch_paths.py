"""Launch-path comparison: the native shim (csrc/launch_shim.c) vs pure ctypes.

Each path runs in its own process (KERNELKILN_LAUNCHER=auto|ctypes): host time per launch with
prebuilt arguments, and per whole op call (T = 128), median of 5 x 20000 calls; three alternating rounds of fresh processes.

    python benchmarks/bench_launch_paths.py --out launch.json
"""
import argparse
import json
import os

from bench_foundation import child_json, host_time_us, per_token_cast_launch


def child():
    import torch

    import kernelkiln
    from kernelkiln._ops.launch import raw_stream as _raw_stream
    from kernelkiln._runtime import launcher, store
    from kernelkiln.moe import _topk
    scores = torch.randn(128, 256, device="cuda")
    x = torch.randn(128, 7168, device="cuda", dtype=torch.bfloat16)
    idx = kernelkiln.moe.topk_gate(scores, 8)
    kernel = store().kernel("topk_gate", _topk.CONTRACT.param_names,
                            _topk.CONTRACT.variant(experts_per_lane=8, vector_loads=True), 0)
    args = kernel.bind_named(dict(scores=scores.data_ptr(), topk_idx=idx.data_ptr(), err=_topk._flag(0)[0].data_ptr(),
                                  num_tokens=128, num_experts=256, experts_div4=64, num_topk=8))
    stream = _raw_stream(0)
    rec = {"path": launcher.LAUNCH_PATH,
           "launch_only_us": host_time_us(lambda: kernel.launch(0, stream, args), calls=10000),
           "topk_gate_us": host_time_us(lambda: kernelkiln.moe.topk_gate(scores, 8), calls=10000),
           "per_token_cast_us": host_time_us(lambda: kernelkiln.quant.per_token_cast(x, "e4m3", 128), calls=10000)}
    rec.update(_per_token_cast_breakdown(x))
    assert torch.equal(kernelkiln.moe.topk_gate(scores, 8), kernelkiln.torch.stable_topk(scores, 8))
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in rec.items()}))


def _per_token_cast_breakdown(x):
    """Where per_token_cast's host time goes at T = 128: its parts timed alone, same loop."""
    import torch

    from kernelkiln._ops.launch import raw_stream as _raw_stream
    from kernelkiln.quant import _per_token
    t, h = x.shape
    dev = x.device
    q = torch.empty((t, h), dtype=torch.float8_e4m3fn, device=dev)
    sf = torch.empty((t, h // 128), dtype=torch.float32, device=dev)
    ptc_kernel, args = per_token_cast_launch(x, q, sf)
    go = ptc_kernel.launcher_for(0)
    n = 10000

    def key():
        return _per_token._plans.get((x.dtype, x.shape[1:], x.stride(), x.device, "e4m3", 128, False, False, False,
                                      False))

    return {
        "ptc_part_two_empty_us": host_time_us(lambda: (torch.empty((t, h), dtype=torch.float8_e4m3fn, device=dev),
                                                       torch.empty((t, h // 128), dtype=torch.float32, device=dev)),
                                              calls=n),
        "ptc_part_two_empty_ints_us": host_time_us(lambda: (torch.empty(t, h, dtype=torch.float8_e4m3fn, device=dev),
                                                            torch.empty(t, h // 128, dtype=torch.float32, device=dev)),
                                                   calls=n),
        "ptc_part_plan_key_lookup_us": host_time_us(key, calls=n),
        "ptc_part_launch_prebuilt_args_us": host_time_us(lambda: go(_raw_stream(0), args, False), calls=n),
        "ptc_part_data_ptr_us": host_time_us(x.data_ptr, calls=n),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--child", action="store_true")
    a = p.parse_args()
    if a.child:
        return child()
    results = []
    # Host figures on the VM vary by up to 1.5x from process to process, so the two paths alternate over
    # three rounds of fresh processes; compare like rounds, or the medians per path.
    for rnd in range(3):
        for path in ("auto", "ctypes"):
            results.append({"round": rnd, **child_json(__file__, dict(os.environ, KERNELKILN_LAUNCHER=path))})
    print(json.dumps(results))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"name": "launch_paths_host_us", "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
