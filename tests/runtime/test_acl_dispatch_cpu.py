"""The public functions choose the backend by the tensors' device type, and every NPU error path says what is
missing. Runs the real public functions, config, store lookup, loader and ctypes calls in a subprocess where

* torch_npu is stood in by tests/npu_standin.py (torch's PrivateUse1 backend renamed "npu", CPU memory behind the
  tensors, a fake stream handle),
* libascendcl.so by the recording stand-in of tests/acl_standin.py (it records loads, lookups and launches and runs
  nothing: 64 vector cores on npu:0, 66 on npu:1),
* the Ascend store by one written here (docs/ASCEND.md "Store format") whose launch specs mirror the Ascend kernels'
  parameters and whose binaries are arbitrary bytes with their sha256 (nothing is compiled; there is no CANN here).

So what is proven: which kernel an NPU call picks, the values it passes by name (decoded from the packed buffer at
the offsets the store records), the block dim, stream and device, and the errors; not that an Ascend kernel computes
the right bits (that needs CANN and an Ascend 950)."""
import struct

import acl_standin
import npu_standin
import pytest
import torch

import kernelkiln

PTC_PARAMS = [
    {"name": "x", "kind": "buffer", "dtype": "bfloat16"}, {"name": "out", "kind": "buffer", "dtype": "uint8"},
    {"name": "sf", "kind": "buffer", "dtype": "float32"}, {"name": "hidden", "kind": "scalar", "ctype": "int32"},
    {"name": "round_sf", "kind": "scalar", "ctype": "int32"}, {"name": "clamp_min", "kind": "scalar", "ctype": "float32"},
    {"name": "sf_col_major", "kind": "scalar", "ctype": "int32"}, {"name": "num_cores", "kind": "scalar", "ctype": "int32"},
    {"name": "num_tokens", "kind": "symbol", "ctype": "int32", "param": 0, "dim": 0},
    {"name": "x_ld", "kind": "symbol", "ctype": "int32", "param": 0, "dim": 1},
    {"name": "out_ld", "kind": "symbol", "ctype": "int32", "param": 1, "dim": 1},
    {"name": "sf_rows", "kind": "symbol", "ctype": "int32", "param": 2, "dim": 0},
    {"name": "sf_ld", "kind": "symbol", "ctype": "int32", "param": 2, "dim": 1},
]
# device order deliberately unlike PrimFunc order: the op binds by name, the loader packs by the spec
PTC_DEVICE_ARGS = ["x", "out", "sf", "num_tokens", "x_ld", "out_ld", "sf_rows", "sf_ld", "hidden", "round_sf",
                   "clamp_min", "sf_col_major", "num_cores"]
PTC_WORK_ITEMS = "((num_tokens + 31) // 32) * ((hidden + 511) // 512)"
BUILT = [dict(in_dtype="bfloat16", fmt="e4m3", num_per_channels=128, sf_kind="fp32"),
         dict(in_dtype="bfloat16", fmt="e2m1", num_per_channels=32, sf_kind="ue8m0")]


TOPK_PARAMS = [{"name": "scores", "kind": "buffer", "dtype": "float32"},
               {"name": "topk_idx", "kind": "buffer", "dtype": "int64"},
               {"name": "err", "kind": "buffer", "dtype": "int32"},
               {"name": "num_cores", "kind": "scalar", "ctype": "int32"},
               {"name": "num_tokens", "kind": "symbol", "ctype": "int32", "param": 0, "dim": 0},
               {"name": "num_experts", "kind": "symbol", "ctype": "int32", "param": 0, "dim": 1},
               {"name": "num_topk", "kind": "symbol", "ctype": "int32", "param": 1, "dim": 1}]
TOPK_DEVICE_ARGS = ["scores", "topk_idx", "err", "num_cores", "num_tokens", "num_experts", "num_topk"]
TOPK_BUILT = dict(num_vregs=4)  # E = 256: four 64-lane registers


def _ptc_store(directory, status="built", reason=None):
    k = acl_standin.kernel_spec("topk_gate_kernel", TOPK_PARAMS, TOPK_DEVICE_ARGS, work_items="num_tokens",
                                dyn_ubuf_bytes=7936)
    e, images = acl_standin.entry("topk_gate", TOPK_BUILT, TOPK_PARAMS, [k], b"stand-in topk aibin" * 5)
    entries = [e]
    for i, v in enumerate(BUILT):
        k = acl_standin.kernel_spec(f"per_token_cast_kernel_{i}", PTC_PARAMS, PTC_DEVICE_ARGS,
                                    work_items=PTC_WORK_ITEMS, dyn_ubuf_bytes=150_000 + i)
        e, img = acl_standin.entry("per_token_cast", v, PTC_PARAMS, [k], f"stand-in aibin {i}".encode() * 7)
        entries.append(e)
        images.update(img)
    return acl_standin.write_store(directory, entries if status == "built" else [], images, status, reason)


_SCRIPT = r"""
import ctypes, os, struct
import npu_standin, acl_standin
NpuTensor = npu_standin.install()
import torch, kernelkiln
from kernelkiln._runtime import acl, ascend
from kernelkiln.quant import _per_token
from kernelkiln_contract.quant import PER_TOKEN_CAST

out = {}
rec = acl_standin.Recorder(ctypes.CDLL(os.environ["KERNELKILN_ASCENDCL"]))

def err(call):
    try:
        call()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None

def use(store=None, lib=None):
    os.environ["KERNELKILN_ASCEND_KERNEL_DIR"] = store or os.environ["STORE_BUILT"]
    os.environ["KERNELKILN_ASCENDCL"] = lib or os.environ["ACL_STANDIN"]
    ascend.reset_store(); acl.reset(); kernelkiln.config.get_device_num_sms.cache_clear()

def launch_record(**tensors):
    r = rec.launch()
    r["args"] = r["args"].hex()
    r["ptrs"] = {n: t.data_ptr() for n, t in tensors.items()}
    return r

use()
x = NpuTensor(torch.randn(300, 7168).bfloat16(), 1)
q, sf = kernelkiln.quant.per_token_cast(x, "e4m3", 128)
out["e4m3"] = dict(launch_record(x=x, q=q, sf=sf), q=[str(q.device), list(q.shape), str(q.dtype)],
                   sf=[str(sf.device), list(sf.shape), str(sf.dtype)], lookups=rec.lookups(), loads=rec.load_sizes(),
                   load_devices=rec.load_devices())

x2 = NpuTensor(torch.randn(5, 256).bfloat16(), 0)
q2, sf2 = kernelkiln.quant.per_token_cast(x2, "e2m1", 32, use_tma_aligned_col_major_sf=True, round_sf=True,
                                          use_packed_ue8m0=True)
out["e2m1"] = dict(launch_record(x=x2, q=q2, sf=sf2), q=[str(q2.device), list(q2.shape), str(q2.dtype)],
                   sf=[list(sf2.shape), list(sf2.stride()), str(sf2.dtype)], lookups=rec.lookups())

# torch_npu's tensors are plain torch.Tensor objects, so they reach the launch-plan fast path: two calls must both
# launch the Ascend kernel and leave no (CUDA) plan behind; a CUDA plan here would need libcuda, which is absent
npu_standin.as_plain_tensors(_per_token, NpuTensor)
before = rec.int("launch_count")
for _ in range(2):
    kernelkiln.quant.per_token_cast(x2, "e4m3", 128)
out["fast_path"] = dict(launches=rec.int("launch_count") - before, plans=len(_per_token._plans))
npu_standin.as_plain_tensors(_per_token, torch.Tensor)
from kernelkiln.moe import _topk
npu_standin.as_plain_tensors(_topk, NpuTensor)
before = rec.int("launch_count")
for _ in range(2):
    kernelkiln.moe.topk_gate(NpuTensor(torch.randn(40, 256), 0), 8)
out["topk_fast_path"] = dict(launches=rec.int("launch_count") - before, plans=len(_topk._plans))
npu_standin.as_plain_tensors(_topk, torch.Tensor)

scores = NpuTensor(torch.randn(40, 256), 0)
idx = kernelkiln.moe.topk_gate(scores, 8)
from kernelkiln.moe import _topk_ascend
word = _topk_ascend._words[0]
out["topk"] = dict(launch_record(scores=scores, idx=idx, err=word),
                   idx=[str(idx.device), list(idx.shape), str(idx.dtype)], lookups=rec.lookups(),
                   word=[str(word.device), word.backing.tolist()])
out["topk_not_built"] = err(lambda: kernelkiln.moe.topk_gate(NpuTensor(torch.randn(4, 100)), 6))
out["topk_clean"] = err(lambda: kernelkiln.moe.check_errors("npu:0"))
word.backing[:] = torch.tensor([1, 17], dtype=torch.int32)  # as the kernel records a non-finite row
out["topk_error"] = err(lambda: kernelkiln.check_errors("npu:0"))
out["topk_error_cleared"] = [word.backing.tolist(), err(lambda: kernelkiln.moe.check_errors("npu:0"))]
kernelkiln.moe.set_sync_checks(True)
word.backing[:] = torch.tensor([1, 5], dtype=torch.int32)
out["topk_sync_error"] = err(lambda: kernelkiln.moe.topk_gate(scores, 8))
kernelkiln.moe.set_sync_checks(False)
out["topk_empty"] = [rec.int("launch_count"), list(kernelkiln.moe.topk_gate(NpuTensor(torch.randn(0, 256)), 8).shape),
                     rec.int("launch_count")]

out["not_built"] = err(lambda: kernelkiln.quant.per_token_cast(x2, "e4m3", 32))
out["no_ascend_form"] = err(lambda: kernelkiln.quant.per_token_cast(x2, "e4m3", 128, use_e4m3_sf=True))
out["fp32_input"] = err(lambda: kernelkiln.quant.per_token_cast(NpuTensor(torch.randn(4, 128)), "e4m3", 128))
out["no_ascend_op"] = err(lambda: kernelkiln.transpose.transpose(NpuTensor(torch.randn(64, 64).bfloat16())))
use(store=os.environ["STORE_EMPTY"])
out["no_store"] = err(lambda: kernelkiln.quant.per_token_cast(x2, "e4m3", 128))
use(store=os.environ["STORE_LOWERED"])
out["not_compiled"] = err(lambda: kernelkiln.quant.per_token_cast(x2, "e4m3", 128))
use(lib=os.environ["ACL_MISSING"])
out["no_cann"] = err(lambda: kernelkiln.quant.per_token_cast(x2, "e4m3", 128))
use()
npu = torch.npu
del torch.npu  # an NPU tensor in a process whose torch.npu is gone: as if torch_npu could not load
out["no_torch_npu"] = err(lambda: kernelkiln.quant.per_token_cast(x2, "e4m3", 128))
torch.npu = npu
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("ascend")
    lib = acl_standin.build(d)
    if lib is None:
        pytest.skip("no C compiler (cc or gcc) on this machine to build the libascendcl.so stand-in")
    built = _ptc_store(d / "built")
    lowered = acl_standin.write_store(d / "lowered", [], {}, status="not-compiled", reason="bisheng not found")
    (d / "empty").mkdir()
    env = {"ACL_STANDIN": str(lib), "KERNELKILN_ASCENDCL": str(lib), "ACL_MISSING": str(d / "no" / "libascendcl.so"),
           "STORE_BUILT": str(built), "STORE_LOWERED": str(lowered), "STORE_EMPTY": str(d / "empty"),
           "KERNELKILN_KERNEL_DIR": str(d / "empty")}
    return npu_standin.run_script(_SCRIPT, env)


def _decode(launch, variant_index):
    """{name: value} of the packed host arguments, read at the offsets the store recorded for that variant."""
    k = acl_standin.kernel_spec("k", PTC_PARAMS, PTC_DEVICE_ARGS)
    raw = bytes.fromhex(launch["args"])
    assert len(raw) == k["args_bytes"]
    codes = {"ptr": "<Q", "int32": "<i", "float32": "<f"}
    return {PTC_PARAMS[a["param"]]["name"]: struct.unpack_from(codes[a.get("ctype", "ptr")], raw, a["offset"])[0]
            for a in k["args"]}


def test_an_npu_call_launches_the_ascend_kernel_with_its_arguments_by_name(results):
    r = results["e4m3"]
    assert r["q"] == ["npu:1", [300, 7168], "torch.float8_e4m3fn"]
    assert r["sf"] == ["npu:1", [300, 56], "torch.float32"]
    assert r["lookups"] == ["per_token_cast_kernel_0"] and len(r["loads"]) == 1 and r["load_devices"] == [1]
    got = _decode(r, 0)
    assert got == dict(x=r["ptrs"]["x"], out=r["ptrs"]["q"], sf=r["ptrs"]["sf"], num_tokens=300, x_ld=7168,
                       out_ld=7168, sf_rows=300, sf_ld=56, hidden=7168, round_sf=0,
                       clamp_min=struct.unpack("<f", struct.pack("<f", 1e-4))[0], sf_col_major=0, num_cores=66)
    # npu:1 has 66 vector cores; 10 x 14 = 140 tiles of work, so every core is used
    assert r["blocks"] == 66 and r["device"] == 1
    assert r["stream"] == npu_standin.FAKE_STREAM + 1
    assert (r["num_attrs"], r["attr_id"], r["attr_value"]) == (1, 2, 150_000)


def test_packed_ue8m0_column_major_scales_and_few_work_items(results):
    r = results["e2m1"]
    assert r["q"] == ["npu:0", [5, 128], "torch.int8"]
    assert r["sf"] == [[5, 2], [1, 8], "torch.int32"]  # TMA-aligned column-major: tokens padded to 8 per word row
    assert r["lookups"] == ["per_token_cast_kernel_0", "per_token_cast_kernel_1"]
    got = _decode(r, 1)
    assert (got["x"], got["out"], got["sf"]) == (r["ptrs"]["x"], r["ptrs"]["q"], r["ptrs"]["sf"])
    assert (got["num_tokens"], got["hidden"], got["x_ld"], got["out_ld"]) == (5, 256, 256, 128)
    assert (got["sf_rows"], got["sf_ld"], got["sf_col_major"], got["round_sf"]) == (2, 8, 1, 1)
    assert got["num_cores"] == 1 and r["blocks"] == 1  # one tile of work: one core, not 64
    assert r["stream"] == npu_standin.FAKE_STREAM and r["device"] == 0


def test_topk_gate_on_an_npu(results):
    r = results["topk"]
    assert r["idx"] == ["npu:0", [40, 8], "torch.int64"]
    assert r["lookups"][-1] == "topk_gate_kernel"
    raw = bytes.fromhex(r["args"])
    # 40 rows: 40 of the 64 vector cores
    assert struct.unpack("<QQQiiii", raw) == (r["ptrs"]["scores"], r["ptrs"]["idx"], r["ptrs"]["err"], 40, 40, 256, 8)
    assert r["blocks"] == 40 and (r["num_attrs"], r["attr_value"]) == (1, 7936)
    assert r["word"] == ["npu:0", [0, 0]]  # the error word is a zeroed int32 [2] on the scores' NPU
    assert "no Ascend topk_gate kernel for num_vregs=2" in results["topk_not_built"]  # E = 100: two registers
    assert "num_vregs=4" in results["topk_not_built"]


def test_topk_gate_errors_on_an_npu_are_raised_by_check_errors(results):
    assert results["topk_clean"] is None
    assert results["topk_error"].startswith("NonFiniteScoresError: topk_gate on npu:0 found non-finite")
    assert "token 17" in results["topk_error"]
    assert results["topk_error_cleared"] == [[0, 0], None]
    assert results["topk_sync_error"].startswith("NonFiniteScoresError") and "token 5" in results["topk_sync_error"]
    before, shape, after = results["topk_empty"]
    assert shape == [0, 8] and before == after  # no tokens: no launch


def test_plain_npu_tensors_take_no_cuda_launch_plan(results):
    assert results["fast_path"] == {"launches": 2, "plans": 0}
    assert results["topk_fast_path"] == {"launches": 2, "plans": 0}


def test_a_variant_the_store_lacks_lists_what_exists_and_how_to_build_it(results):
    e = results["not_built"]
    assert e.startswith("AscendStoreError: no Ascend per_token_cast kernel for") and "num_per_channels=32" in e
    assert "fmt='e4m3', num_per_channels=128, sf_kind='fp32'" in e and "fmt='e2m1'" in e
    assert "manifest" in e and "CANN toolkit >= 9.2" in e and "KERNELKILN_ASCEND_KERNEL_DIR" in e


def test_forms_without_an_ascend_kernel_are_refused_naming_the_option(results):
    assert "use_e4m3_sf=True" in results["no_ascend_form"] and "no Ascend kernel" in results["no_ascend_form"]
    assert "float32 input has no Ascend kernel" in results["fp32_input"]


def test_an_op_without_ascend_kernels_says_so_on_an_npu(results):
    e = results["no_ascend_op"]
    assert e.startswith("ValueError: x is on npu:0: this call has no Ascend (NPU) kernel") and "per_token_cast" in e


def test_no_ascend_binaries_installed(results):
    e = results["no_store"]
    assert e.startswith("AscendStoreError: npu:0: this kernelkiln installation has no Ascend binaries")
    assert "kernelkiln-ascend" in e and "CANN toolkit >= 9.2" in e and "KERNELKILN_ASCEND_KERNEL_DIR" in e


def test_a_store_lowered_without_cann_says_it_was_not_compiled(results):
    e = results["not_compiled"]
    assert "was lowered but not compiled (bisheng not found)" in e and "holds no Ascend binaries" in e


def test_no_cann_runtime(results):
    assert results["no_cann"].startswith("AclUnavailableError: the CANN runtime (libascendcl.so) was not found")


def test_no_torch_npu(results):
    assert results["no_torch_npu"].startswith("UnsupportedDeviceError: an Ascend kernel launch needs torch_npu")


def test_other_devices_keep_the_cuda_error():
    x = torch.empty(4, 128, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="x is on meta; KernelKiln kernels need a CUDA tensor"):
        kernelkiln.quant.per_token_cast(x, "e4m3", 128)
