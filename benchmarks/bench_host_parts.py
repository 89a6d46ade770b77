"""Where the host time of a T = 128 call goes: each part of per_token_cast's and topk_gate's plan path
timed alone in the same loop as bench_foundation's host_time_us, beside torch's own costs (allocation
forms, eager ops with one and two outputs), "lean" variants (the least Python around the same allocations and
launch: lower bounds, not implementations) and, with --floor, the driver's cost per launch from a C loop
(benchmarks/launch_floor.c, built with gcc here or beforehand).

Host figures on the VM vary from process to process, so three fresh processes run the same parts, and within a
process the parts' repetitions are interleaved:

    python benchmarks/bench_host_parts.py --floor .gpu-exp/launch_floor --out host_parts.json
"""
import argparse
import json
import statistics
import subprocess

from bench_foundation import child_json, host_time_us, per_token_cast_launch

CALLS, REPS = 5000, 7


def child():
    import torch

    import kernelkiln
    from kernelkiln._ops.launch import raw_stream as _raw_stream
    from kernelkiln._ops.outputs import RowOutputs
    from kernelkiln.quant import _per_token

    dev = torch.device("cuda", 0)
    x = torch.randn(128, 7168, device=dev, dtype=torch.bfloat16)
    scores = torch.randn(128, 256, device=dev)
    small = torch.randn(1024, device=dev)
    t, h = x.shape
    fp8 = torch.float8_e4m3fn
    kernelkiln.quant.per_token_cast(x, "e4m3", 128)  # plans exist from here on
    kernelkiln.moe.topk_gate(scores, 8)

    q = torch.empty(t, h, dtype=fp8, device=dev)
    sf = torch.empty(t, h // 128, dtype=torch.float32, device=dev)
    kernel, args = per_token_cast_launch(x, q, sf)
    go = kernel.launcher_for(0)
    dk = kernel.load(0)[1][0]
    stream = _raw_stream(0)
    q_rows = RowOutputs(h, fp8, dev)
    parts = {
        "loop_overhead": lambda: None,
        # torch's own cost of an eager op on this machine: one output, two outputs (frexp: one kernel, two
        # allocations, like per_token_cast), and torch.topk beside topk_gate
        "torch_eager_mul_1024": lambda: small * 2.0,
        "torch_frexp_1024": lambda: torch.frexp(small),
        "torch_topk_128x256_k8": lambda: torch.topk(scores, 8),
        "empty_q_ints_device_obj": lambda: torch.empty(t, h, dtype=fp8, device=dev),
        "empty_q_ints_device_index": lambda: torch.empty(t, h, dtype=fp8, device=0),
        "empty_q_tuple_device_obj": lambda: torch.empty((t, h), dtype=fp8, device=dev),
        "empty_q_new_empty": lambda: x.new_empty((t, h), dtype=fp8),
        "empty_q_1d": lambda: torch.empty(t * h, dtype=fp8, device=dev),
        "empty_q_like_row_template": lambda: torch.empty_like(q_rows[t]),  # the launch plans' form
        "empty_topk_idx": lambda: torch.empty(t, 8, dtype=torch.int64, device=dev),
        "x_device": lambda: x.device,
        "x_get_device": x.get_device,
        "x_shape0": lambda: x.shape[0],
        "x_size0": lambda: x.size(0),
        "x_stride": x.stride,
        "x_data_ptr": x.data_ptr,
        "raw_stream": lambda: _raw_stream(0),
        "ptc_key_and_lookup": lambda: _per_token._plans.get(
            (x.dtype, x.shape[1:], x.stride(), x.device, "e4m3", 128, False, False, False, False)),
        "ptc_key_ints_and_lookup": lambda: _per_token._plans.get(
            (x.dtype, x.size(1), x.stride(0), x.stride(1), x.get_device(), "e4m3", 128, False, False, False, False)),
        "grid_eval": lambda: dk.grid(args),
        "pack": lambda: dk.packed.pack(1, 57, 1, 0, stream, *dk.pick(args)),
        "go_prebuilt_args": lambda: go(stream, args, False),
        "per_token_cast": lambda: kernelkiln.quant.per_token_cast(x, "e4m3", 128),
        "topk_gate": lambda: kernelkiln.moe.topk_gate(scores, 8),
    }
    if hasattr(dk, "packed"):
        blob = dk.packed.pack(*dk.grid(args), 0, stream, *dk.pick(args))
        shim, kptr = _shim_of(dk)
        parts["shim_call_prepacked"] = lambda: shim(kptr, blob)
        assert kernel.arg_names == _per_token.CONTRACT.args, kernel.arg_names  # the lean parts' literal tuples
        parts["lean_ptc_alloc_pack_launch"] = _lean_per_token_cast(dk, x, shim, kptr)
        parts["lean_ptc_plan_template"] = _lean_plan_per_token_cast(kernel, x)
        parts["lean_ptc_one_alloc_views"] = _lean_per_token_cast(dk, x, shim, kptr, alloc="one")
        parts["lean_ptc_no_alloc"] = _lean_per_token_cast(dk, x, shim, kptr, alloc="none")
    parts["lean_topk_alloc_launch"] = _lean_topk_gate(scores)
    # Interleaved: every part's k-th repetition runs next to every other part's, so a drift of the machine within
    # the process (seen: 1.5x) moves all parts alike; each figure is the median over REPS.
    times = {name: [] for name in parts}
    for _ in range(REPS):
        for name, fn in parts.items():
            times[name].append(host_time_us(fn, calls=CALLS, reps=1))
    rec = {name: round(statistics.median(v), 3) for name, v in times.items()}
    rec["launch_path"] = kernelkiln._runtime.launcher.LAUNCH_PATH
    print(json.dumps(rec))


def _lean_per_token_cast(dk, x, shim, kptr, alloc="two"):
    """The least Python the current shim ABI allows: two allocations, the grid lambda, one pack, one call (a lower
    bound for the plan path, not an implementation: no checks or key lookup). alloc="one": both outputs as views
    of one fp32 allocation; "none": into preallocated outputs (the `out=` floor)."""
    import torch

    from kernelkiln._ops.launch import raw_stream as _raw_stream
    dev, fp8, f32 = x.device, torch.float8_e4m3fn, torch.float32
    pack, pick, grid = dk.packed.pack, dk.pick, dk.grid

    q0, sf0 = torch.empty(128, 7168, dtype=fp8, device=dev), torch.empty(128, 56, dtype=f32, device=dev)
    # the least Python on purpose: the arguments as one literal tuple per call, in the order of the kernel's launch
    # arguments (the caller checked those names against the contract's)

    def run():
        t = x.shape[0]
        if alloc == "two":
            q = torch.empty(t, 7168, dtype=fp8, device=dev)
            sf = torch.empty(t, 56, dtype=f32, device=dev)
        elif alloc == "one":
            buf = torch.empty(t * (1792 + 56), dtype=f32, device=dev)
            sf = buf.as_strided((t, 56), (56, 1), t * 1792)
            q = buf.view(fp8).as_strided((t, 7168), (7168, 1))
        else:
            q, sf = q0, sf0
        args = (x.data_ptr(), q.data_ptr(), sf.data_ptr(), t, 112, 896, 896, 56, 1, 0, 1, 1e-4, 0, 0, 0, 1, 1,
                (t + 7) >> 3, 7)
        shim(kptr, pack(*grid(args), 0, _raw_stream(0), *pick(args)))
        return q, sf

    return run


def _lean_plan_per_token_cast(kernel, x):
    """lean_ptc_alloc_pack_launch's counterpart with the launch plans' pieces: row-template allocations and a bound
    launcher that packs only the per-call values (interleaved with it, this is the A/B of those two pieces)."""
    import torch

    from kernelkiln._ops.launch import raw_stream as _raw_stream
    from kernelkiln._ops.outputs import RowOutputs
    from kernelkiln.quant import _per_token
    fixed = dict(hidden_div64=112, x_stride_vec=896, out_stride_unit=896, sf_stride_t=56, sf_stride_k=1, round_sf=0,
                 write_data=1, x_sf=0, in_sf_stride_t=0, in_sf_stride_k=0, in_block_m=1, in_block_k=1,
                 num_col_blocks=7)
    go = kernel.bound_launcher_named(0, fixed, _per_token._PLAN_VALUES)
    q_out, sf_out = RowOutputs(7168, torch.float8_e4m3fn, x.device), RowOutputs(56, torch.float32, x.device)
    empty_like = torch.empty_like

    def run():
        t = x.shape[0]
        q = empty_like(q_out[t])
        sf = empty_like(sf_out[t])
        go(_raw_stream(0), (x.data_ptr(), q.data_ptr(), sf.data_ptr(), t, 1e-4, (t + 7) >> 3), False)
        return q, sf

    return run


def _lean_topk_gate(scores):
    """topk_gate's least Python: one allocation and the launcher (no key lookup, error-word read or checks)."""
    import torch

    from kernelkiln._ops.launch import raw_stream as _raw_stream
    from kernelkiln._runtime import store
    from kernelkiln.moe import _topk
    kernel = store().kernel(_topk.OP, _topk.CONTRACT.param_names,
                            _topk.CONTRACT.variant(experts_per_lane=8, vector_loads=True), 0)
    flag_ptr, dev = _topk._flag(0)[0].data_ptr(), scores.device
    go = kernel.bound_launcher_named(0, dict(err=flag_ptr, num_experts=256, experts_div4=64, num_topk=8),
                                     ("scores", "topk_idx", "num_tokens"))

    def run():
        t = scores.shape[0]
        idx = torch.empty(t, 8, dtype=torch.int64, device=dev)
        go(_raw_stream(0), (scores.data_ptr(), idx.data_ptr(), t), False)
        return idx

    return run


def _shim_of(dk):
    from kernelkiln._runtime import launcher
    return launcher._shim_launch, dk._shim_ptr


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--floor", help="path of the built launch_floor binary")
    p.add_argument("--child", action="store_true")
    a = p.parse_args()
    if a.child:
        return child()
    results = []
    for rnd in range(3):
        results.append({"round": rnd, **child_json(__file__)})
        if a.floor:
            floor = subprocess.run([a.floor], capture_output=True, text=True, check=True)
            results.append({"round": rnd, "c_launch_floor": json.loads(floor.stdout)})
    print(json.dumps(results, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"name": "host_parts_us", "calls": CALLS, "reps": REPS, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
