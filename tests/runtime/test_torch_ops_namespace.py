"""torch.ops.tilekiln.<op> works right after `import tilekiln` although the families import lazily."""
import os
import subprocess
import sys
from pathlib import Path

import torch

import tilekiln  # noqa: F401
from tilekiln._runtime import torch_ops


def test_op_family_map_is_every_registered_op():
    import tilekiln.moe  # noqa: F401
    import tilekiln.quant  # noqa: F401
    import tilekiln.transpose  # noqa: F401
    registered = {n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("tilekiln::")}
    assert registered == set(torch_ops.OP_FAMILY)


def test_an_op_lookup_imports_its_family_only():
    code = ("import sys, torch, tilekiln; assert 'tilekiln.moe' not in sys.modules; "
            "op = torch.ops.tilekiln.topk_gate.default; "
            "print(op.name(), 'tilekiln.moe' in sys.modules, 'tilekiln.quant' in sys.modules, op.__module__)")
    env = dict(os.environ, PYTHONPATH=str(Path(tilekiln.__file__).resolve().parents[1]))  # this tilekiln
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=env).stdout.split()
    # torch.compile's code generation finds the op again through its module name
    assert out == ["tilekiln::topk_gate", "True", "False", "torch.ops.tilekiln"]


def test_an_unknown_op_is_an_attribute_error():
    try:
        torch.ops.tilekiln.no_such_op
    except AttributeError as e:
        assert "no_such_op" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def test_torch_compile_code_generation_finds_the_op():
    """Inductor's generated code names the op by its module; on this CPU machine the compiled graph gets as
    far as the call, which the CUDA-only op then refuses (before the fix: ObjNotFoundError in codegen)."""
    import pytest

    def f(x):
        return torch.ops.tilekiln.topk_gate(x * 2, 8)

    torch._dynamo.reset()
    with pytest.raises(NotImplementedError, match="'CPU' backend"):
        torch.compile(f, fullgraph=True)(torch.randn(64, 256))
