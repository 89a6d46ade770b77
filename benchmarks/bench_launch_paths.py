"""ctypes-only launch path vs a C shim (benchmarks/launch_shim.c), same kernel, same arguments.

Host time per launch of a tiny topk_gate (T = 1), prebuilt arguments, median of 5 x 20000 launches.
Needs a C compiler on the GPU machine to build the shim (cc -O2 -shared).
"""
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def per_call_us(fn, calls=20000, reps=5):
    for _ in range(500):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(out)


def main(out_path):
    import tilekiln
    from tilekiln._runtime import _raw_stream, driver, store
    from tilekiln.moe import _topk

    scores = torch.randn(1, 256, device="cuda")
    idx = tilekiln.moe.topk_gate(scores, 8)
    dev = 0
    kernel = store().kernel("topk_gate", _topk.PARAM_NAMES, (8, True), dev)
    args = (scores.data_ptr(), idx.data_ptr(), _topk._flag(dev)[0].data_ptr(), 1, 256, 64, 8)
    stream = _raw_stream(dev)
    ctypes_us = per_call_us(lambda: kernel.launch(dev, stream, args))

    src = Path(__file__).with_name("launch_shim.c")
    so = Path(tempfile.mkdtemp()) / "libtk_launch_shim.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    shim = ctypes.CDLL(str(so))
    shim.tk_launch.restype = ctypes.c_int
    d = driver.get_driver()
    launch_ex = ctypes.cast(d.cuLaunchKernelEx, ctypes.c_void_p).value
    ctx, dks = kernel.load(dev)
    k = dks[0]
    lay = k.layout
    offsets = (ctypes.c_uint16 * len(lay.offsets))(*lay.offsets)
    st = k.state()
    _, attrs_addr, nattrs = st.attrs[False]

    def shim_launch():
        g = k.grid(args)
        blob = lay.struct.pack(*[args[i] for i in lay.sources])
        rc = shim.tk_launch(ctypes.c_void_p(launch_ex), ctypes.c_void_p(k.function), g[0], g[1], g[2], *k.block,
                            k.smem, ctypes.c_void_p(stream), ctypes.c_void_p(attrs_addr), nattrs, blob, offsets,
                            len(lay.offsets))
        assert rc == 0, rc

    shim_us = per_call_us(shim_launch)
    assert torch.equal(idx, tilekiln.torch.stable_topk(scores, 8))
    rec = {"name": "launch_path_host_us", "ctypes_only": round(ctypes_us, 2), "c_shim": round(shim_us, 2),
           "kernel": "topk_gate T=1", "calls": 20000}
    print(json.dumps(rec))
    with open(out_path, "w") as f:
        json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
