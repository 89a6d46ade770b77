"""The Ascend loader (kernelkiln._runtime.ascend over kernelkiln._runtime.acl) driven through a recording stand-in
for libascendcl.so (tests/acl_standin.py), compiled here with the system C compiler.

What is real: the loader's ctypes calls with the documented ACL signatures, its argument packing, locking, sha256
check and error handling. What is stood in: libascendcl.so itself (it records, it executes nothing), the binary
(arbitrary bytes with their sha256) and the stream handle (a number). No NPU, CANN or torch_npu is involved."""
import ctypes
import hashlib
import struct
import threading

import acl_standin
import pytest

from kernelkiln._runtime import acl, ascend
from kernelkiln._runtime.launcher import LaunchError


@pytest.fixture(scope="module")
def standin_path(tmp_path_factory):
    so = acl_standin.build(tmp_path_factory.mktemp("acl"))
    if so is None:
        pytest.skip("no C compiler (cc or gcc) on this machine to build the libascendcl.so stand-in")
    return so


@pytest.fixture
def rec(standin_path, monkeypatch):
    """The stand-in as the process's libascendcl.so, with its records cleared."""
    monkeypatch.setenv("KERNELKILN_ASCENDCL", str(standin_path))
    acl.reset()
    monkeypatch.setattr(ascend, "_BINARIES", {})
    r = acl_standin.Recorder(ctypes.CDLL(str(standin_path)))
    r.reset()
    yield r
    acl.reset()


# PrimFunc order: x, out, n, eps, flag, big; device order differs and mixes sizes, so padding is exercised
PARAMS = [{"name": "x", "kind": "buffer"}, {"name": "out", "kind": "buffer"}, {"name": "n", "kind": "scalar"},
          {"name": "eps", "kind": "scalar"}, {"name": "flag", "kind": "scalar"}, {"name": "big", "kind": "scalar"}]
ARGS = [{"kind": "scalar", "param": 4, "ctype": "int8"}, {"kind": "ptr", "param": 0},
        {"kind": "scalar", "param": 2, "ctype": "int32"}, {"kind": "scalar", "param": 3, "ctype": "float32"},
        {"kind": "scalar", "param": 5, "ctype": "int64"}, {"kind": "ptr", "param": 1},
        {"kind": "scalar", "param": 2, "ctype": "uint16"}]


def _kernel(tmp_path, image=b"\x7fELF stand-in aicore binary \x00\x01\x02", sha=None, kernels=None, name="k.aibin"):
    path = tmp_path / name
    path.write_bytes(image)
    entry = {"op": "toy", "key": "toy[a=1]", "sha256": sha or hashlib.sha256(image).hexdigest(),
             "spec": {"params": PARAMS, "kernels": kernels or [
                 {"symbol": "toy_kernel", "args": ARGS, "block_dim": "min((n + 63) // 64, 48)",
                  "dyn_ubuf_bytes": 7936}]}}
    return ascend.AscendKernel(entry, path), image


def test_layout_aligns_each_argument_to_at_least_4_bytes_and_the_buffer_to_8():
    lay = ascend.AclArgLayout(ARGS)
    # int8 at 0 (4-byte slot), ptr at 8, int32 at 16, float32 at 20, int64 at 24, ptr at 32, uint16 at 40 -> 44 -> 48
    assert lay.offsets == [0, 8, 16, 20, 24, 32, 40]
    assert lay.size == 48 == lay.struct.size
    assert lay.sources == [4, 0, 2, 3, 5, 1, 2]
    with pytest.raises(LaunchError, match="cannot pass"):
        ascend.AclArgLayout([{"kind": "scalar", "param": 0, "ctype": "float16"}])


def test_launch_delivers_packed_arguments_block_dim_stream_and_ub_size(rec, tmp_path):
    k, image = _kernel(tmp_path)
    args = (0x12C000001000, 0x12C000002000, 4001, -0.75, 1, (1 << 40) + 3)
    stream = 0x5A5A00001234
    k.launch(0, stream, args)
    seen = rec.launch()
    assert seen["count"] == 1
    assert seen["blocks"] == 48  # min((4001 + 63) // 64, 48)
    assert seen["stream"] == stream
    assert seen["placeholders"] == (None, 0)
    assert seen["num_attrs"] == 1 and seen["attr_id"] == acl.ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE
    assert seen["attr_value"] == 7936
    raw = seen["args"]
    assert len(raw) == 48
    assert struct.unpack_from("<b", raw, 0)[0] == 1
    assert struct.unpack_from("<Q", raw, 8)[0] == 0x12C000001000
    assert struct.unpack_from("<i", raw, 16)[0] == 4001
    assert struct.unpack_from("<f", raw, 20)[0] == -0.75
    assert struct.unpack_from("<q", raw, 24)[0] == (1 << 40) + 3
    assert struct.unpack_from("<Q", raw, 32)[0] == 0x12C000002000
    assert struct.unpack_from("<H", raw, 40)[0] == 4001
    assert raw[1:8] == b"\0" * 7 and raw[42:48] == b"\0" * 6  # padding is zero
    # the function launched is the one the lookup returned, from the binary that was loaded
    assert seen["function"] == k.load(0)[0].function
    assert rec.lookups() == ["toy_kernel"]
    assert rec.load_sizes() == [len(image)] and rec.first_image(len(image)) == image


def test_a_kernel_without_dynamic_ub_passes_no_config_and_zero_blocks_launch_nothing(rec, tmp_path):
    k, _ = _kernel(tmp_path, kernels=[{"symbol": "plain", "args": ARGS[1:3], "block_dim": "n"}])
    k.launch(0, 7, (0x1000, 0x2000, 5, 0.0, 0, 0))
    seen = rec.launch()
    assert seen["num_attrs"] == -1 and seen["blocks"] == 5 and len(seen["args"]) == 16
    k.launch(0, 7, (0x1000, 0x2000, 0, 0.0, 0, 0))  # no tokens: block dim 0 is skipped, as CUDA skips empty grids
    assert rec.launch()["count"] == 1


def test_loading_is_lazy_and_happens_once_per_kernel_and_device(rec, tmp_path):
    k, _ = _kernel(tmp_path)
    assert rec.int("load_count") == 0  # constructing the kernel touches nothing
    args = (0x1000, 0x2000, 64, 1.0, 0, 0)
    for _ in range(3):
        k.launch(0, 1, args)
    assert rec.int("load_count") == 1 and rec.lookups() == ["toy_kernel"] and rec.launch()["count"] == 3
    k.launch(1, 1, args)
    assert rec.int("load_count") == 2 and rec.lookups() == ["toy_kernel", "toy_kernel"]
    assert rec.load_devices() == [0, 1]  # each binary was loaded with its device current
    # a second variant in the same binary file (one compile unit) shares the loaded binary
    twin = ascend.AscendKernel(dict(k.entry, key="toy[a=2]"), k.binary_path)
    twin.launch(0, 1, args)
    assert rec.int("load_count") == 2


def test_concurrent_first_launches_load_once(rec, tmp_path):
    k, _ = _kernel(tmp_path)
    start, errors = threading.Barrier(8), []

    def go():
        try:
            start.wait()
            k.launch(0, 1, (0x1000, 0x2000, 64, 1.0, 0, 0))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # the stand-in sleeps 20 ms inside each load: unserialized first calls would load several times
    assert rec.int("load_count") == 1 and rec.lookups() == ["toy_kernel"]
    assert rec.launch()["count"] == 8


def test_a_binary_whose_sha256_differs_from_the_index_is_refused_before_acl_sees_it(rec, tmp_path):
    k, _ = _kernel(tmp_path, sha="0" * 64)
    with pytest.raises(LaunchError, match="sha256 .* does not match the index .*reinstall"):
        k.launch(0, 1, (0x1000, 0x2000, 64, 1.0, 0, 0))
    assert rec.int("load_count") == 0 and rec.launch()["count"] == 0


def test_a_missing_binary_file_is_a_clear_error(rec, tmp_path):
    k, _ = _kernel(tmp_path)
    k.binary_path.unlink()
    with pytest.raises(LaunchError, match="cannot be read.*reinstall"):
        k.load(0)


@pytest.mark.parametrize("knob, code, pattern", [
    ("fail_load", 107000, r"aclrtBinaryLoadFromData\(.*k\.aibin, \d+ bytes\) on npu:0 failed: "
                          r"ACL_ERROR_RT_PARAM_INVALID \(107000\): stand-in: binary rejected"),
    ("fail_lookup", 507033, r"aclrtBinaryGetFunction\(toy_kernel\) in .*k\.aibin failed: ACL error \(507033\): "
                            r"stand-in: no such kernel function"),
])
def test_acl_errors_of_loading_name_the_call_the_code_and_acl_s_message(rec, tmp_path, knob, code, pattern):
    k, _ = _kernel(tmp_path)
    rec.set(knob, code)
    with pytest.raises(acl.AclError, match=pattern):
        k.load(0)
    rec.set(knob, 0)
    k.load(0)  # a failed load is not cached: it is retried at the next call


def test_a_failed_launch_names_the_kernel_block_dim_and_error(rec, tmp_path):
    k, _ = _kernel(tmp_path)
    rec.set("fail_launch", 207001)
    with pytest.raises(LaunchError, match=r"toy_kernel \(Ascend\) with block dim 1, dynamic UB 7936 bytes on npu:0: "
                                          r"aclrtLaunchKernelWithHostArgs failed: ACL_ERROR_RT_MEMORY_ALLOCATION"):
        k.launch(0, 1, (0x1000, 0x2000, 3, 1.0, 0, 0))


def test_the_launch_runs_on_the_tensor_s_device_and_restores_the_current_one(rec, tmp_path):
    k, _ = _kernel(tmp_path)
    rec.set("device_set", 1)
    rec.set("current_device", 3)
    k.launch(1, 1, (0x1000, 0x2000, 3, 1.0, 0, 0))
    assert rec.launch()["device"] == 1 and rec.load_devices() == [1]
    assert rec.int("current_device") == 3
    before = rec.int("set_device_count")
    rec.set("current_device", 1)
    k.launch(1, 1, (0x1000, 0x2000, 3, 1.0, 0, 0))  # already current: no device switch
    assert rec.int("set_device_count") == before


def test_arguments_bind_by_name(rec, tmp_path):
    k, _ = _kernel(tmp_path)
    assert k.bind_named(dict(x=1, out=2, n=3, eps=0.5, flag=0, big=9)) == (1, 2, 3, 0.5, 0, 9)
    with pytest.raises(LaunchError, match=r"missing \['big'\], unknown \['extra'\]"):
        k.bind_named(dict(x=1, out=2, n=3, eps=0.5, flag=0, extra=9))


def test_no_cann_runtime_is_named_with_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELKILN_ASCENDCL", str(tmp_path / "nowhere" / "libascendcl.so"))
    acl.reset()
    try:
        with pytest.raises(acl.AclUnavailableError, match=r"CANN runtime \(libascendcl.so\) was not found.*CANN "
                                                          r">= 9.2.*set_env.sh.*torch_npu"):
            acl.get_acl()
    finally:
        acl.reset()


def test_the_default_search_covers_the_toolkit_locations(monkeypatch):
    monkeypatch.delenv("KERNELKILN_ASCENDCL", raising=False)
    monkeypatch.setenv("ASCEND_HOME_PATH", "/opt/cann")
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    c = acl.candidates()
    assert c[0] == "libascendcl.so"
    assert "/opt/cann/lib64/libascendcl.so" in c and "/opt/cann/runtime/lib64/libascendcl.so" in c
    assert "/usr/local/Ascend/ascend-toolkit/latest/runtime/lib64/libascendcl.so" in c


def test_a_cann_runtime_without_the_launch_entry_point_is_named(tmp_path):
    compiler = acl_standin.shutil.which("cc") or acl_standin.shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc or gcc) on this machine")
    src = tmp_path / "old.c"
    src.write_text("int aclrtBinaryLoadFromData(void){return 0;} int aclrtBinaryGetFunction(void){return 0;}\n")
    so = tmp_path / "libascendcl_old.so"
    acl_standin.subprocess.run([compiler, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    with pytest.raises(acl.AclUnavailableError, match="has no aclrtLaunchKernelWithHostArgs.*CANN runtime >= 9.2"):
        acl.Acl(ctypes.CDLL(str(so)), str(so))


def test_device_queries_go_through_acl_device_info(rec):
    a = acl.get_acl()
    assert a.device_info(0, acl.ACL_DEV_ATTR_AICORE_CORE_NUM) == 32
    assert a.device_info(0, acl.ACL_DEV_ATTR_VECTOR_CORE_NUM) == 64
    assert a.soc_name() == "Ascend950PR_standin"
    rec.set("fail_get_device_info", 207000)
    with pytest.raises(acl.AclError, match=r"aclrtGetDeviceInfo\(102\) failed: ACL_ERROR_RT_FEATURE_NOT_SUPPORT"):
        a.device_info(0, acl.ACL_DEV_ATTR_CUBE_CORE_NUM)


def test_the_store_s_recorded_layout_must_be_the_one_the_loader_packs(rec, tmp_path):
    good = [dict(a, offset=o, size=s) for a, o, s in zip(ARGS, [0, 8, 16, 20, 24, 32, 40], [1, 8, 4, 4, 8, 8, 2])]
    k, _ = _kernel(tmp_path, kernels=[{"symbol": "toy_kernel", "args": good, "args_bytes": 48, "block_dim": "n"}])
    k.launch(0, 1, (0x1000, 0x2000, 3, 1.0, 0, 0))
    assert rec.launch()["count"] == 1
    packed_tight = [dict(a, offset=o) for a, o in zip(good, [0, 1, 9, 13, 17, 25, 33])]  # no 4-byte minimum
    bad, _ = _kernel(tmp_path, name="bad.aibin", image=b"other image",
                     kernels=[{"symbol": "tight", "args": packed_tight, "args_bytes": 40, "block_dim": "n"}])
    with pytest.raises(LaunchError, match="tight: the store's argument layout .* differs from the loader's"):
        bad.launch(0, 1, (0x1000, 0x2000, 3, 1.0, 0, 0))
    assert rec.launch()["count"] == 1
