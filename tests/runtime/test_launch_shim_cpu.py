"""The native launch shim, end to end without a GPU: the loader's packed call goes through
csrc/launch_shim.c into a recording stand-in for cuLaunchKernelEx, which must see the grid,
block, stream, launch attributes and every kernel argument at the right address."""
import ctypes
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kernelkiln._runtime import launcher

ROOT = Path(__file__).resolve().parents[2]

# Records what cuLaunchKernelEx received: the CUlaunchConfig and the first 8 bytes of each argument.
_RECORDER = r"""
#include <stdint.h>
#include <string.h>
typedef struct { unsigned grid[3], block[3], smem; void *stream, *attrs; unsigned num_attrs; } cfg_t;
cfg_t seen_config;
void *seen_function;
uint64_t seen_args[8];
int record_launch(const cfg_t *c, void *f, void **params, void **extra) {
  seen_config = *c;
  seen_function = f;
  for (int i = 0; i < 4; ++i) memcpy(&seen_args[i], params[i], 8);
  return extra ? 99 : 0;
}
"""


@pytest.fixture(scope="module")
def shim_lib(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) on this machine to build the shim")
    d = tmp_path_factory.mktemp("shim")
    (d / "recorder.c").write_text(_RECORDER)
    so = d / "libshim_test.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(ROOT / "csrc" / "launch_shim.c"),
                    str(d / "recorder.c")], check=True)
    return ctypes.CDLL(str(so))


class _FakeDriver:
    def __init__(self, lib):
        self.cuLaunchKernelEx = lib.record_launch


def test_packed_launch_delivers_grid_stream_and_arguments(shim_lib, monkeypatch):
    assert shim_lib.tk_head_bytes() == launcher._SHIM_HEAD.size
    assert shim_lib.tk_kernel_size() == ctypes.sizeof(launcher._ShimKernel)
    packed = shim_lib.tk_launch_packed
    packed.restype = ctypes.c_int
    monkeypatch.setattr(launcher, "_shim_launch", packed)
    monkeypatch.setattr(launcher.drv, "get_driver", lambda: _FakeDriver(shim_lib))
    # device order differs from PrimFunc order (params 2, 0, 3, 1), mixed sizes force padding
    kspec = {"symbol": "k", "block": [128, 2, 1], "dyn_smem_bytes": 4096, "pdl": True,
             "grid": ["(n + 3) // 4", 7, 1],
             "args": [{"kind": "scalar", "param": 2, "ctype": "int32"}, {"kind": "ptr", "param": 0},
                      {"kind": "scalar", "param": 3, "ctype": "float32"}, {"kind": "ptr", "param": 1}]}
    k = launcher.DeviceKernel(kspec, 0xF00D, ["x", "out", "n", "eps"])
    assert k.launch == k._launch_shim
    args = (0x7F0000001000, 0x7F0000002000, 4001, 0.5)
    stream = 0x55AA55AA1234
    assert k.launch(k.grid(args), stream, args, True) == 0
    cfg = ctypes.cast(shim_lib.seen_config, ctypes.POINTER(ctypes.c_uint * 7)).contents
    assert list(cfg) == [1001, 7, 1, 128, 2, 1, 4096]
    assert ctypes.c_void_p.in_dll(shim_lib, "seen_function").value == 0xF00D
    raw = (ctypes.c_uint64 * 8).in_dll(shim_lib, "seen_args")
    assert raw[0] & 0xFFFFFFFF == 4001
    assert raw[1] == 0x7F0000001000
    assert struct.unpack("<f", struct.pack("<I", raw[2] & 0xFFFFFFFF))[0] == 0.5
    assert raw[3] == 0x7F0000002000
    # the stream and the PDL attribute array (with one more attribute than without PDL)
    whole = (ctypes.c_ubyte * 56).in_dll(shim_lib, "seen_config")
    stream_seen, attrs_seen, nattrs = struct.unpack_from("<QQI", bytes(whole), 32)
    assert stream_seen == stream and nattrs == 1 and attrs_seen == k._shim_attrs[True][1]


def test_picker_selects_device_order():
    assert launcher._picker([2, 0])(("a", "b", "c")) == ("c", "a")
    assert launcher._picker([1])(("a", "b")) == ("b",)
    assert launcher._picker([])(("a",)) == ()


def test_template_launch_patches_per_call_values_into_the_fixed_arguments(shim_lib, monkeypatch):
    """A launch plan's call (launcher.DeviceKernel.bound): the template holds the fixed arguments, the call packs
    only the varying ones (here a pointer and a float, in an order unlike the device's) and the grid."""
    assert shim_lib.tk_template_size() == ctypes.sizeof(launcher._ShimTemplate)
    packed, template = shim_lib.tk_launch_packed, shim_lib.tk_launch_template
    packed.restype = template.restype = ctypes.c_int
    monkeypatch.setattr(launcher, "_shim_launch", packed)
    monkeypatch.setattr(launcher, "_shim_launch_template", template)
    monkeypatch.setattr(launcher.drv, "get_driver", lambda: _FakeDriver(shim_lib))
    kspec = {"symbol": "k", "block": [64, 1, 1], "dyn_smem_bytes": 0, "pdl": False,
             "grid": ["(n + rows - 1) // rows", "cols", 1],
             "args": [{"kind": "scalar", "param": 2, "ctype": "int32"}, {"kind": "ptr", "param": 0},
                      {"kind": "scalar", "param": 3, "ctype": "float32"}, {"kind": "ptr", "param": 1}]}
    k = launcher.DeviceKernel(kspec, 0xBEEF, ["x", "out", "n", "eps", "rows", "cols"])
    fixed = (0, 0x7F0000002000, 1000, 0.0, 8, 5)  # out, n, rows and cols fixed; x and eps vary per call
    errors = []
    go = k.bound(fixed, (3, 0), lambda *a: errors.append(a))
    assert go is not None
    for x_ptr, eps, stream in ((0x7F0000001000, 0.25, 0x1234), (0x7F0000009000, -3.5, 0x5678)):
        go(stream, (eps, x_ptr), False)
        cfg = ctypes.cast(shim_lib.seen_config, ctypes.POINTER(ctypes.c_uint * 7)).contents
        assert list(cfg) == [125, 5, 1, 64, 1, 1, 0]  # grid from the fixed n, rows and cols
        raw = (ctypes.c_uint64 * 8).in_dll(shim_lib, "seen_args")
        assert raw[0] & 0xFFFFFFFF == 1000
        assert raw[1] == x_ptr
        assert struct.unpack("<f", struct.pack("<I", raw[2] & 0xFFFFFFFF))[0] == eps
        assert raw[3] == 0x7F0000002000
        whole = (ctypes.c_ubyte * 56).in_dll(shim_lib, "seen_config")
        assert struct.unpack_from("<QQI", bytes(whole), 32) == (stream, k._shim_attrs[False][1], 0)
    assert not errors


def test_template_grid_can_depend_on_a_per_call_value(shim_lib, monkeypatch):
    template = shim_lib.tk_launch_template
    template.restype = ctypes.c_int
    monkeypatch.setattr(launcher, "_shim_launch", shim_lib.tk_launch_packed)
    monkeypatch.setattr(launcher, "_shim_launch_template", template)
    monkeypatch.setattr(launcher.drv, "get_driver", lambda: _FakeDriver(shim_lib))
    kspec = {"symbol": "k", "block": [128, 1, 1], "dyn_smem_bytes": 0, "pdl": False, "grid": ["blocks", "cols", 1],
             "args": [{"kind": "ptr", "param": 0}, {"kind": "scalar", "param": 1, "ctype": "int32"},
                      {"kind": "ptr", "param": 4}, {"kind": "scalar", "param": 5, "ctype": "int64"}]}
    k = launcher.DeviceKernel(kspec, 0xBEEF, ["x", "n", "blocks", "cols", "y", "big"])
    go = k.bound((0, 0, 0, 3, 0x2000, 1 << 40), (0, 1, 2), None)  # blocks is read by the grid only
    go(0, (0x1000, 77, 9), False)
    cfg = ctypes.cast(shim_lib.seen_config, ctypes.POINTER(ctypes.c_uint * 7)).contents
    assert list(cfg)[:3] == [9, 3, 1]
    raw = (ctypes.c_uint64 * 8).in_dll(shim_lib, "seen_args")
    assert (raw[0], raw[1] & 0xFFFFFFFF, raw[2], raw[3]) == (0x1000, 77, 0x2000, 1 << 40)
