"""On a machine without CUDA every public entry point raises the project's own error, never torch's
``AssertionError: Torch not compiled with CUDA enabled`` nor a dispatcher dump."""
import pytest
import torch

import kernelkiln

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA device")


@pytest.mark.parametrize("call", [
    lambda: kernelkiln.preload(),
    lambda: kernelkiln.check_errors(),
    lambda: kernelkiln.moe.check_errors(),
    lambda: kernelkiln.quant.check_errors(),
    lambda: kernelkiln.get_num_sms(),
    lambda: kernelkiln.get_device_num_sms(),
    lambda: kernelkiln.set_num_sms(8),
    lambda: kernelkiln.get_max_smem_per_sm(),
    lambda: kernelkiln.get_num_vec_cores(),
], ids=["preload", "check_errors", "moe.check_errors", "quant.check_errors", "get_num_sms", "get_device_num_sms",
        "set_num_sms", "get_max_smem_per_sm", "get_num_vec_cores"])
def test_device_queries_say_a_gpu_is_needed(call):
    with pytest.raises(kernelkiln.UnsupportedDeviceError, match="needs an NVIDIA GPU"):
        call()


@pytest.mark.parametrize("op, args, name", [
    ("topk_gate", (torch.randn(4, 256), 8), "scores"),
    ("transpose", (torch.randn(64, 64, dtype=torch.bfloat16),), "x"),
    ("per_token_cast", (torch.randn(4, 128, dtype=torch.bfloat16), "e4m3", 128, False, False, False, False), "x"),
])
def test_registered_ops_on_cpu_tensors_name_the_argument(op, args, name):
    with pytest.raises(ValueError, match=rf"{name}\b.*CUDA tensor"):
        getattr(torch.ops.kernelkiln, op)(*args)


def test_public_functions_on_cpu_tensors_name_the_argument():
    with pytest.raises(ValueError, match="scores is on cpu"):
        kernelkiln.moe.topk_gate(torch.randn(4, 256), 8)
    with pytest.raises(ValueError, match="x is on cpu"):
        kernelkiln.quant.per_token_cast(torch.randn(4, 128, dtype=torch.bfloat16), "e4m3", 128)


def test_ascend_queries_say_there_is_no_npu():
    assert not kernelkiln.is_ascend() and kernelkiln.get_device() == "cuda"
    with pytest.raises(RuntimeError, match="no Ascend device"):
        kernelkiln.get_max_ub_per_vector_core()


def test_dir_lists_only_the_public_api():
    names = dir(kernelkiln)
    assert "importlib" not in names and not [n for n in names if n.startswith("_") and n != "__version__"]
    for n in ("quant", "moe", "transpose", "torch", "config", "preload", "set_pdl"):
        assert n in names
