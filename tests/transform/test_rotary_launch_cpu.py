"""apply_rotary's host side on the CPU: what it hands the driver (through the launch recorder's stand-in, with the
real launch shim and the ci-subset store's launch spec), for 3-D and 4-D inputs, key, positions and conjugate."""
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = r"""
import json, os, sys
sys.path.insert(0, {python!r}); sys.path.insert(0, {recorder!r})
import recorder
recorder._install_fake_cuda()
os.environ["KERNELKILN_KERNEL_DIR"] = {store!r}
rec = recorder.Recorder()
recorder._install_driver(rec, {shim!r})
import torch, kernelkiln
torch.manual_seed(0)
ang = torch.rand(4096, 32) * 6.283
cache = torch.cat((ang.cos(), ang.sin()), dim=1)
out = {{}}
q, k = torch.randn(3, 100, 8, 64).to(torch.bfloat16), torch.randn(3, 100, 2, 64).to(torch.bfloat16)
pos = torch.randint(0, 4000, (1, 100), dtype=torch.int32).expand(3, 100)
kernelkiln.transform.apply_rotary(q, cache, k, pos, interleaved=True, conjugate=True, seqlen_offset=5)
out["4d"] = recorder._canonical(rec.launches, [("q", q), ("k", k), ("cache", cache), ("pos", pos)])
rec.launches = []
q3 = torch.randn(77, 128, 64).to(torch.bfloat16)
kernelkiln.transform.apply_rotary(q3, cache, interleaved=True, seqlen_offset=9)
out["3d"] = recorder._canonical(rec.launches, [("q", q3), ("cache", cache)])
print(json.dumps(out))
"""


def _i32(a):
    return struct.unpack("<i", bytes.fromhex(a["int32"]))[0]


def _i64(a):
    return struct.unpack("<q", bytes.fromhex(a["int64"]))[0]


def _f32(a):
    return struct.unpack("<f", bytes.fromhex(a["float32"]))[0]


@pytest.fixture(scope="module")
def launches(subset_store, tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) on this machine to build the launch shim")
    so = tmp_path_factory.mktemp("shim") / "shim.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(ROOT / "csrc" / "launch_shim.c")], check=True)
    code = _SCRIPT.format(python=str(ROOT / "python"), recorder=str(ROOT / "tests" / "launch_record"),
                          store=str(subset_store), shim=str(so))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_query_then_key_with_batch_grid_and_vector_strides(launches):
    q_launch, k_launch = launches["4d"]
    for launch, heads, name in ((q_launch, 8, "q"), (k_launch, 2, "k")):
        assert launch["block"] == [128, 1, 1] and launch["symbol"].startswith("apply_rotary_kernel")
        tokens_per_cta = max(1, 128 * 4 // (heads * 8))
        assert launch["grid"] == [-(-100 // tokens_per_cta), 3, 1]
        ptrs = [a["ptr"] for a in launch["args"] if "ptr" in a]
        assert f"{name}+0" in ptrs and "cache+0" in ptrs and "pos+0" in ptrs
        ints = [_i32(a) for a in launch["args"] if "int32" in a]
        longs = [_i64(a) for a in launch["args"] if "int64" in a]
        floats = [_f32(a) for a in launch["args"] if "float32" in a]
        assert floats == [-1.0]  # conjugate: the sign of sin
        # strides in units of 4 elements: batch 100 * heads * 64 / 4, sequence heads * 64 / 4, head 16; the broadcast
        # positions' batch stride is 0
        assert 100 * heads * 16 in longs and heads * 16 in longs and 0 in longs
        assert {3, 100, heads, 16, 1, 5, tokens_per_cta} <= set(ints)


def test_three_dimensional_query_without_positions(launches):
    (launch,) = launches["3d"]
    assert launch["grid"] == [77, 1, 1]  # 128 heads x 8 items per token: one token per CTA
    ints = [_i32(a) for a in launch["args"] if "int32" in a]
    assert 0 in ints and 9 in ints  # has_positions = 0, the offset
    assert [_f32(a) for a in launch["args"] if "float32" in a] == [1.0]
