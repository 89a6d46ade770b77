"""Argument errors of transpose / batched_transpose: raised before any device work (no GPU needed)."""
import pytest
import torch

import kernelkiln


@pytest.mark.parametrize("fn,x,exc,match", [
    ("transpose", torch.zeros(64, 64, dtype=torch.float16), TypeError, "x has dtype torch.float16; allowed"),
    ("transpose", torch.zeros(64, 64, 1), ValueError, "x must be 2-D"),
    ("batched_transpose", torch.zeros(64, 64), ValueError, "x must be 3-D"),
    ("transpose", torch.zeros(64, 96), ValueError, r"multiples of 64"),
    ("batched_transpose", torch.zeros(2, 32, 64), ValueError, r"multiples of 64"),
    ("transpose", torch.zeros(64, 128)[:, ::2], ValueError, "inner stride 1"),
    ("transpose", torch.zeros(64, 130)[:, :64].as_strided((64, 64), (130, 1)), ValueError,
     "multiples of 4 elements"),
    ("batched_transpose", torch.zeros(2 * 64 * 64 + 2)[:2 * 64 * 64].as_strided((2, 64, 64), (4098, 64, 1)),
     ValueError, "multiples of 4 elements"),
    ("transpose", [[1.0]], TypeError, "x must be a torch.Tensor"),
])
def test_bad_inputs(fn, x, exc, match):
    with pytest.raises(exc, match=match):
        getattr(kernelkiln.transpose, fn)(x)


def test_valid_cpu_input_asks_for_cuda():
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        kernelkiln.transpose.transpose(torch.zeros(64, 128, dtype=torch.bfloat16))


def test_empty_needs_no_device():
    y = kernelkiln.transpose.batched_transpose(torch.zeros(0, 64, 128, dtype=torch.float8_e4m3fn))
    assert y.shape == (0, 128, 64) and y.dtype == torch.float8_e4m3fn
    assert kernelkiln.transpose.transpose(torch.zeros(0, 64)).shape == (64, 0)


def test_fake_tensor_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        y = torch.ops.kernelkiln.batched_transpose(torch.empty(8, 128, 64, dtype=torch.bfloat16, device="cuda"))
        assert y.shape == (8, 64, 128) and y.is_contiguous()


@pytest.mark.parametrize("elem_bytes", [1, 2, 4])
def test_default_manifest_builds_the_variants_the_runtime_picks(elem_bytes):
    """For each element width, the variants that the contract's rules (which the runtime calls) select, with 16-byte
    loads and without, are built by the default manifest."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # build_tools
    from build_tools import manifest
    from kernelkiln_contract.transpose import BATCHED_TRANSPOSE, transpose_vectors, transpose_wide_loads

    keys = {v.key for v in manifest.load(manifest.default_manifest_path())[1]}
    # an aligned base and strides, a base 4 elements off, a row stride of 4 more elements than a 16-byte multiple
    for ptr, row_stride in ((1 << 20, 512), ((1 << 20) + 4 * elem_bytes, 512), (1 << 20, 516)):
        values = dict(elem_bytes=elem_bytes, wide_loads=transpose_wide_loads(elem_bytes, ptr, row_stride, 0),
                      vectors_per_thread=transpose_vectors(elem_bytes))
        assert BATCHED_TRANSPOSE.invalid_reason(values) is None
        assert manifest.Variant("batched_transpose", tuple(values.items())).key in keys
