"""torch.ops.kernelkiln.<op> works right after `import kernelkiln` although the families import lazily and register
their torch.library ops only on the first lookup of one of them (kernelkiln/_ops/torch_ops.py)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

import kernelkiln  # noqa: F401
from kernelkiln._ops import torch_ops


# defined(): the kernelkiln ops the dispatcher knows, asked without a lookup in torch.ops.kernelkiln (which registers).
_PRELUDE = """
import torch
def defined():
    return {n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("kernelkiln::")}
"""


def _run(code):
    """stdout of code (after _PRELUDE) in a fresh process: this test process may have registered any op already."""
    env = dict(os.environ, PYTHONPATH=str(Path(kernelkiln.__file__).resolve().parents[1]))  # this kernelkiln
    r = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_declarations_are_every_registered_op():
    torch_ops.register_all()
    registered = {n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("kernelkiln::")}
    assert registered == set(torch_ops.op_families()) and len(registered) >= 25


def test_an_op_lookup_registers_its_family_only():
    """The declaring family is found among the families imported already; only its ops are registered."""
    code = ("import sys, torch, kernelkiln, kernelkiln.moe; assert 'kernelkiln.quant' not in sys.modules; "
            "op = torch.ops.kernelkiln.topk_gate.default; "
            "print(op.name(), 'kernelkiln.quant' in sys.modules, sorted(defined()) == sorted(kernelkiln._ops.library."
            "declared('kernelkiln.moe')), op.__module__)")
    out = _run(code).split()
    # torch.compile's code generation finds the op again through its module name
    assert out == ["kernelkiln::topk_gate", "False", "True", "torch.ops.kernelkiln"]


def test_importing_a_family_registers_no_op_and_the_first_lookup_registers_its_family():
    out = _run("""
        import kernelkiln, kernelkiln.moe, kernelkiln.quant, kernelkiln.transpose
        from kernelkiln._ops.torch_ops import op_families
        OP_FAMILY = op_families()
        print(sorted(defined()))
        q, sf = torch.ops.kernelkiln.per_token_cast(torch.empty(256, 512, dtype=torch.bfloat16, device="meta"),
                                                  "e4m3", 128, False, False, False, False)  # its fake implementation
        print(defined() == {n for n, f in OP_FAMILY.items() if f == "kernelkiln.quant"}, tuple(q.shape), tuple(sf.shape))
        torch.ops.kernelkiln.cast_back, torch.ops.kernelkiln.per_token_cast  # registered ones: no second registration
        torch.ops.kernelkiln.transpose
        print(defined() == {n for n, f in OP_FAMILY.items() if f in ("kernelkiln.quant", "kernelkiln.transpose")})
    """).splitlines()
    assert out == ["[]", "True (256, 512) (256, 4)", "True"]


def test_first_lookups_from_many_threads_register_once():
    # the op names from another process, so this one's lookups are the first (and import the families)
    all_names = _run("from kernelkiln._ops.torch_ops import op_families; print(sorted(op_families()))").strip()
    out = _run(f"""
        import threading, kernelkiln
        OP_FAMILY = {all_names}
        names = sorted(OP_FAMILY) * 4
        barrier, found, errors = threading.Barrier(len(names)), {{}}, []
        def look(i, name):
            barrier.wait()
            try:
                found[i] = (name, getattr(torch.ops.kernelkiln, name))
            except Exception as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=look, args=(i, n)) for i, n in enumerate(names)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        same = all(p is getattr(torch.ops.kernelkiln, n) for n, p in found.values())
        print(errors, len(found) == len(names), same, defined() == set(OP_FAMILY))
    """).strip().split(maxsplit=1)
    assert len(eval(all_names)) >= 25
    assert out == ["[]", "True True True"]


def test_first_lookup_while_dynamo_traces_registers_and_traces_without_a_graph_break():
    """The wrappers' compile paths make the first lookup of an op during Dynamo tracing; fullgraph=True fails on a
    graph break. Meta tensors run the fake implementations, so the whole compile works on a CPU machine."""
    out = _run("""
        import kernelkiln, kernelkiln.moe, kernelkiln.quant
        print(sorted(defined()))
        graphs = []
        def backend(gm, example_inputs):
            graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
            return gm.forward
        def f(x):
            q, sf = kernelkiln.quant.per_token_cast(x * 2, "e4m3", 128)
            return q, sf + 1, kernelkiln.moe.topk_gate(sf, 2)
        fc = torch.compile(f, fullgraph=True, backend=backend)
        x = torch.empty(256, 512, dtype=torch.bfloat16, device="meta")
        for _ in range(2):  # the second call reuses the graph
            q, sf, idx = fc(x)
        print(tuple(q.shape), q.dtype, tuple(sf.shape), tuple(idx.shape), len(graphs))
        print(graphs[0])
        print("per_token_cast" in defined(), "topk_gate" in defined(), "transpose" in defined())
        y = torch.compile(lambda x: torch.ops.kernelkiln.transpose(x + 1), fullgraph=True, backend="aot_eager")(x)
        print(tuple(y.shape), "transpose" in defined())  # a raw first lookup in the compiled function
    """).splitlines()
    assert out[0] == "[]"
    assert out[1] == "(256, 512) torch.float8_e4m3fn (256, 4) (256, 2) 1"
    assert "kernelkiln.per_token_cast" in out[2] and "kernelkiln.topk_gate" in out[2]
    assert out[3:] == ["True True False", "(512, 256) True"]


def test_an_unknown_op_is_an_attribute_error():
    try:
        torch.ops.kernelkiln.no_such_op
    except AttributeError as e:
        assert "no_such_op" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def test_torch_compile_code_generation_finds_the_op():
    """Inductor's generated code names the op by its module; on this CPU machine the compiled graph gets as
    far as the call, where the op's own device check refuses the CPU tensor (before the fix: ObjNotFoundError
    in codegen)."""
    import pytest

    def f(x):
        return torch.ops.kernelkiln.topk_gate(x * 2, 8)

    torch._dynamo.reset()
    with pytest.raises(ValueError, match="scores is on cpu; KernelKiln kernels need a CUDA tensor"):
        torch.compile(f, fullgraph=True)(torch.randn(64, 256))
