"""One declaration per registered op: ``torch.ops.kernelkiln.<name>`` from its typed implementation and its fake.

    @library_op("topk_gate")
    def _topk_gate_op(scores: torch.Tensor, num_topk: int) -> torch.Tensor:
        return _topk.topk_gate(scores, num_topk)

    @_topk_gate_op.register_fake
    def _topk_gate_fake(scores, num_topk):
        return scores.new_empty((scores.shape[0], num_topk), dtype=torch.int64)

sits beside the public function that calls ``_topk_gate_op(...)`` under ``torch.compile`` (the returned handle calls
``torch.ops.kernelkiln.topk_gate``). Declaring only records the op under its family (the package of the declaring
module); nothing is registered with torch.library until the first lookup of one of the family's ops in
``torch.ops.kernelkiln`` (kernelkiln._ops.torch_ops), because registering costs more than the family's import.
The families' op lists are these declarations: no name is listed anywhere else.
"""
import threading

import torch

NAMESPACE = "kernelkiln"
_declared = {}  # family ("kernelkiln.quant") -> {op name: _Declaration}
_lock = threading.Lock()


class _Declaration:
    def __init__(self, name, impl, fake, mutates_args):
        self.name, self.impl, self.fake, self.mutates_args = name, impl, fake, mutates_args
        self.autograd = None  # (backward, setup_context) of ops that have a derivative formula

    def register(self):
        if self.fake is None:
            raise RuntimeError(f"torch op {self.name!r} ({self.impl.__module__}) has no fake implementation")
        op = torch.library.custom_op(f"{NAMESPACE}::{self.name}", self.impl, mutates_args=self.mutates_args)
        op.register_fake(self.fake)
        if self.autograd is not None:
            backward, setup_context = self.autograd
            op.register_autograd(backward, setup_context=setup_context)


class OpHandle:
    """Calls ``torch.ops.kernelkiln.<name>`` (looked up per call: the first lookup registers the family)."""

    def __init__(self, declaration):
        self.declaration = declaration
        self.name = declaration.name

    def register_fake(self, fake):
        """Decorator: ``fake`` is the op's fake implementation (shapes and dtypes of its outputs)."""
        self.declaration.fake = fake
        return fake

    def register_autograd(self, backward, setup_context):
        """The op's derivative formula (torch.library.register_autograd's arguments), registered with the op."""
        self.declaration.autograd = (backward, setup_context)

    def __call__(self, *args, **kwargs):
        return getattr(getattr(torch.ops, NAMESPACE), self.name)(*args, **kwargs)


def family_of(module_name):
    """The op family of a module: ``kernelkiln.quant._per_token`` -> ``kernelkiln.quant``."""
    return ".".join(module_name.split(".")[:2])


def library_op(name, *, fake=None, mutates_args=()):
    """Declare ``torch.ops.kernelkiln.<name>``: the decorated function is its implementation (its annotations are the
    schema); ``fake`` (or the handle's ``register_fake`` decorator) its fake implementation. Returns an OpHandle."""
    def declare(impl):
        family = family_of(impl.__module__)
        with _lock:
            ops = _declared.setdefault(family, {})
            if name in ops:
                raise RuntimeError(f"torch op {name!r} is declared twice ({ops[name].impl.__module__}, "
                                   f"{impl.__module__})")
            ops[name] = declaration = _Declaration(name, impl, fake, mutates_args)
        return OpHandle(declaration)
    return declare


def declared(family):
    """{op name: declaration} of a family whose modules are imported."""
    return dict(_declared.get(family, {}))
