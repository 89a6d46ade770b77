"""Runtime paths that need no GPU: import, no toolchain imports, errors, launch layout, expressions."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernelkiln
from kernelkiln._runtime import artifacts, driver, expr, launcher

PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"


def test_runtime_never_imports_tilelang_or_tvm_statically():
    offenders = []
    for path in PYTHON_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path}: {n}" for n in names if n.split(".")[0] in ("tilelang", "tvm", "tvm_ffi")]
    assert not offenders, offenders


def test_import_loads_no_toolchain_module():
    code = ("import sys; sys.path.insert(0, %r); import kernelkiln, kernelkiln.torch; "
            "print([m for m in sys.modules if m.split('.')[0] in ('tilelang', 'tvm', 'tvm_ffi')])" % str(PYTHON_DIR))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_expression_compiler_evaluates_and_rejects_code():
    f = expr.compile_tuple(["(num_tokens + 3) // 4", "(hidden_div64 + 15) // 16", 1], ["x", "num_tokens", "hidden_div64"])
    assert f((0, 4001, 112)) == (1001, 7, 1)
    for bad in ["__import__('os').system('true')", "num_tokens.real", "[1][0]", "x if 1 else 2", "unknown + 1"]:
        with pytest.raises(ValueError):
            expr.compile_tuple([bad], ["x", "num_tokens"])


def test_expression_compiler_folds_integer_constants_only():
    f = expr.compile_tuple(["(num_tokens + rows - 1) // rows", "cols"], ["num_tokens"], {"rows": 8, "cols": 7})
    assert f((17,)) == (3, 7)
    for bad_constant in (0.5, True, None):  # only ints fold: an expression naming another value is rejected
        with pytest.raises(ValueError):
            expr.compile_tuple(["num_tokens // rows"], ["num_tokens"], {"rows": bad_constant})


def test_argument_layout_follows_abi_alignment():
    lay = launcher._ArgLayout([{"kind": "ptr", "param": 0}, {"kind": "scalar", "param": 1, "ctype": "int32"},
                               {"kind": "tensormap", "desc": "d"}, {"kind": "scalar", "param": 2, "ctype": "int64"},
                               {"kind": "scalar", "param": 3, "ctype": "float32"}])
    assert lay.offsets == [0, 8, 64, 192, 200]
    assert lay.sources == [0, 1, 2, 3] and lay.tensormap_slots == [(64, "d")]
    assert lay.struct.size == 204


def _fake_store(tmp_path, variants):
    (tmp_path / "index.json").write_text(json.dumps({"format": 1, "arches": ["sm_90a"], "variants": variants}))
    s = artifacts.KernelStore(tmp_path)
    s._device_arch[0] = "sm_90a"
    return s


def test_missing_specialization_lists_what_exists_and_how_to_build(tmp_path):
    s = _fake_store(tmp_path, [{"op": "topk_gate", "arch": "sm_90a", "key": "k", "cubin": "c",
                                "variant": {"experts_per_lane": 8, "vector_loads": True}}])
    with pytest.raises(artifacts.MissingSpecializationError) as e:
        s.kernel("topk_gate", ("experts_per_lane", "vector_loads"), (17, False), 0)
    msg = str(e.value)
    assert "experts_per_lane=17" in msg and "experts_per_lane=8, vector_loads=True" in msg
    assert "[[topk_gate]]" in msg and "KERNELKILN_MANIFEST" in msg


def test_unsupported_gpu_architecture_is_named(tmp_path, monkeypatch):
    class FakeDriver:
        def attribute(self, attr, dev):
            return {driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 8,
                    driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0}[attr]
    monkeypatch.setattr(driver, "get_driver", lambda: FakeDriver())
    s = _fake_store(tmp_path, [])
    s._device_arch.clear()
    with pytest.raises(artifacts.UnsupportedDeviceError, match="8.0.*sm_90a"):
        s.device_arch(0)


def test_corrupt_cubin_is_rejected(tmp_path):
    (tmp_path / "k.cubin").write_bytes(b"not the cubin")
    k = launcher.CompiledKernel({"key": "k", "sha256": "0" * 64, "spec": {"params": [], "kernels": []}},
                                tmp_path / "k.cubin")
    with pytest.raises(launcher.LaunchError, match="sha256"):
        k._read_cubin()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-driver message on a machine without a GPU")
def test_no_driver_gives_a_clear_error(monkeypatch):
    monkeypatch.setattr(driver, "_driver", None)
    try:
        driver.get_driver()
    except driver.DriverError as e:
        assert "libcuda.so.1" in str(e) or "cuInit" in str(e)
    else:  # a driver library without a device still fails at cuInit
        pytest.skip("libcuda.so.1 present on this machine")


BF16 = torch.bfloat16


@pytest.mark.parametrize("call,exc,match", [
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(4, 128, dtype=torch.float16), "e4m3", 128), TypeError,
     "x has dtype torch.float16; allowed"),
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(4, 100, dtype=BF16), "e4m3", 128), ValueError,
     "multiple of 64"),
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(4, 128, dtype=BF16), "e5m2", 128), ValueError,
     "fmt must be one of"),
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(4, 128, dtype=BF16), "e4m3", 48), ValueError,
     "num_per_channels must be one of"),
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(4, 128, dtype=BF16), "e4m3", 128, use_packed_ue8m0=True),
     ValueError, "requires round_sf"),
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(4, 128, dtype=BF16), "e4m3", 128, round_sf=True,
                                           use_e4m3_sf=True), ValueError, "cannot both"),
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(4, 128, dtype=BF16), "e4m3", 128, round_sf=1), TypeError,
     "round_sf must be a bool"),
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(128, 4, dtype=BF16).t(), "e4m3", 128), ValueError,
     "inner stride 1"),
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(4, 128, dtype=BF16), "e4m3", 128), ValueError,
     "is on cpu; KernelKiln kernels need a CUDA tensor"),
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(4, 128, dtype=BF16), "e2m1", 32, stochastic_cast=True),
     ValueError, "stochastic_cast"),
    (lambda: kernelkiln.quant.per_token_cast((torch.zeros(4, 128), torch.zeros(4, 1)), "e4m3", 128,
                                           x_block_size=(1, 128)), TypeError, r"x\[0\] \(data\) has dtype"),
    (lambda: kernelkiln.quant.per_token_cast((torch.zeros(4, 128).to(torch.float8_e4m3fn), torch.zeros(4, 2)),
                                           "e4m3", 128, x_block_size=(1, 128)), ValueError, r"must have shape \(4, 1\)"),
    (lambda: kernelkiln.quant.per_token_cast((torch.zeros(4, 128).to(torch.float8_e4m3fn), torch.zeros(4, 1)),
                                           "e4m3", 128), ValueError, "x_block_size"),
    (lambda: kernelkiln.quant.per_token_cast((torch.zeros(4, 128).to(torch.float8_e4m3fn), torch.zeros(4, 32)),
                                           "e4m3", 128, x_block_size=(1, 4)), ValueError, "multiple of 8"),
    (lambda: kernelkiln.quant.per_token_cast(torch.zeros(4, 128, dtype=BF16), "e4m3", 128, x_block_size=(1, 32)),
     ValueError, "only meaningful"),
    (lambda: kernelkiln.quant.per_token_cast_with_precomputed_sf(torch.zeros(4, 128, dtype=BF16), "e4m3", 128,
                                                               torch.zeros(4, 2)), ValueError, "sf must be"),
    (lambda: kernelkiln.moe.topk_gate(torch.zeros(4, 256, dtype=BF16), 8), TypeError, "scores has dtype"),
    (lambda: kernelkiln.moe.topk_gate(torch.zeros(4, 256), 33), ValueError, "num_topk must be"),
    (lambda: kernelkiln.moe.topk_gate(torch.zeros(4, 6), 7), ValueError, r"1\.\.6"),
    (lambda: kernelkiln.moe.topk_gate(torch.zeros(4, 600), 8), ValueError, "1..512"),
    (lambda: kernelkiln.moe.topk_gate(torch.zeros(256, 4).t(), 2), ValueError, "contiguous"),
    (lambda: kernelkiln.moe.topk_gate(torch.zeros(4, 256), 8), ValueError, "is on cpu; KernelKiln kernels need a CUDA tensor"),
    (lambda: kernelkiln.set_pdl(1), TypeError, "use_pdl must be a bool"),
    (lambda: kernelkiln.set_amax_clamp_for_quant("e4m3", False, 0.0), ValueError, "clamp_min_value"),
])
def test_bad_input_names_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_config_roundtrip():
    try:
        kernelkiln.set_amax_clamp_for_quant("e2m1", True, 0.5)
        assert kernelkiln.get_amax_clamp_for_quant("e2m1", True) == 0.5
        kernelkiln.set_token_alignment(64)
        assert kernelkiln.get_token_alignment() == 64
    finally:
        kernelkiln.config.reset_runtime_config()
    assert kernelkiln.get_amax_clamp_for_quant("e4m3", False) == 1e-4


def test_families_load_on_first_use():
    """`import kernelkiln` loads no op family; a quant call's import loads neither the routing family nor
    every reference (first-call cost, issue 2)."""
    code = ("import sys; import kernelkiln; a = {m for m in ('kernelkiln.quant', 'kernelkiln.moe', 'kernelkiln.transpose') "
            "if m in sys.modules}; kernelkiln.quant; "
            "print(sorted(a), 'kernelkiln.moe' in sys.modules, 'kernelkiln.torch.moe_router' in sys.modules)")
    env = {"PYTHONPATH": str(PYTHON_DIR), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["[]", "False", "False"], out.stdout + out.stderr


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float32, torch.int64, torch.int8])
@pytest.mark.parametrize("width", [1, 2, 56, 7168])
def test_row_output_templates_give_fresh_contiguous_tensors(dtype, width):
    """The launch plans allocate with torch.empty_like of a stride-0 template: the result must look exactly like
    torch.empty(t, width), including the one-element corner where a stride-0 template would count as dense."""
    from kernelkiln._ops.outputs import RowOutputs
    outputs = RowOutputs(width, dtype, torch.device("cpu"))
    for t in (1, 2, 3, 128, 1, 4099):
        a, ref = torch.empty_like(outputs[t]), torch.empty(t, width, dtype=dtype)
        assert (a.shape, a.stride(), a.dtype) == (ref.shape, ref.stride(), dtype)
        assert a.untyped_storage().nbytes() == ref.untyped_storage().nbytes()
        assert a.data_ptr() != outputs[t].data_ptr()
