"""Launch-path comparison: the native shim (csrc/launch_shim.c) vs pure ctypes.

Each path runs in its own process (TILEKILN_LAUNCHER=auto|ctypes): host time per launch with
prebuilt arguments, and per whole op call (T = 128), median of 5 x 20000 calls.

    python benchmarks/bench_launch_paths.py --out launch.json
"""
import argparse
import json
import os
import subprocess
import sys

from bench_foundation import host_time_us


def child():
    import torch

    import tilekiln
    from tilekiln._runtime import _raw_stream, launcher, store
    from tilekiln.moe import _topk
    scores = torch.randn(128, 256, device="cuda")
    x = torch.randn(128, 7168, device="cuda", dtype=torch.bfloat16)
    idx = tilekiln.moe.topk_gate(scores, 8)
    kernel = store().kernel("topk_gate", _topk.PARAM_NAMES, (8, True), 0)
    args = (scores.data_ptr(), idx.data_ptr(), _topk._flag(0)[0].data_ptr(), 128, 256, 64, 8)
    stream = _raw_stream(0)
    rec = {"path": launcher.LAUNCH_PATH,
           "launch_only_us": host_time_us(lambda: kernel.launch(0, stream, args), calls=20000),
           "topk_gate_us": host_time_us(lambda: tilekiln.moe.topk_gate(scores, 8), calls=20000),
           "per_token_cast_us": host_time_us(lambda: tilekiln.quant.per_token_cast(x, "e4m3", 128), calls=20000)}
    assert torch.equal(tilekiln.moe.topk_gate(scores, 8), tilekiln.torch.stable_topk(scores, 8))
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in rec.items()}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--child", action="store_true")
    a = p.parse_args()
    if a.child:
        return child()
    results = []
    for path in ("auto", "ctypes"):
        env = dict(os.environ, TILEKILN_LAUNCHER=path)
        out = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(out.stderr)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(json.dumps(results))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"name": "launch_paths_host_us", "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
