"""``torch.ops.kernelkiln.<op>`` right after ``import kernelkiln``; a family registers its ops on first lookup.

The op families are imported lazily: a first call pays only for its own family (importing all three took
56-70 ms on the CPU build machine). Importing a family does not register its torch.library ops either: the
``custom_op`` + ``register_fake`` registrations (25 ops) were 85-92 % of the family imports that every
process's first eager call pays (median of 9 fresh processes, CPU build machine: quant 27 -> 4 ms, moe
17 -> 1.5 ms, transpose 5 -> 0.4 ms without them), although eager calls never go through the registered ops
(the public wrappers call them only under ``torch.compiler.is_compiling()``). So each op is declared with
``kernelkiln._ops.library.library_op`` (which only records it), and ``import kernelkiln`` installs a namespace
object that, on the first lookup of an op, finds the family that declares it and registers that family's ops once
(``register``). The family is found among the families imported already, else by importing them in turn: the
declarations are the only list of ops (a first lookup of a transpose op in a fresh process imports all three).
The wrappers' compile paths look their ops up there, so the first lookup may happen while Dynamo traces:
Dynamo evaluates the attribute itself, outside the traced frame, so the registration runs as plain Python
and the trace goes on without a graph break (tests/runtime/test_torch_ops_namespace.py, fullgraph=True).
"""
import importlib
import threading

import torch
from torch._ops import _OpNamespace  # the class of torch.ops.<namespace> (torch >= 2.4)

from kernelkiln._ops import library

NAMESPACE = library.NAMESPACE


def _families():
    """Every public subpackage of kernelkiln but the references: the op families, found on disk, not listed."""
    import pkgutil
    root = importlib.import_module("kernelkiln")
    return tuple(sorted(f"kernelkiln.{m.name}" for m in pkgutil.iter_modules(root.__path__)
                        if m.ispkg and not m.name.startswith("_") and m.name != "torch"))


FAMILIES = _families()

_lock = threading.RLock()
_registered = set()  # families whose ops are registered
_registering = set()  # families whose ops register now (on the thread that holds _lock)


def register(family):
    """Register the torch.library ops of ``family`` (e.g. "kernelkiln.quant") once; thread-safe, idempotent."""
    if family in _registered:
        return
    importlib.import_module(family)  # outside the lock: imports take their own locks; its modules declare its ops
    with _lock:
        # custom_op looks each op up in torch.ops.kernelkiln right after defining it: that re-entry (same
        # thread, so the RLock lets it in) finds the family in _registering and must not register again.
        if family in _registered or family in _registering:
            return
        _registering.add(family)
        try:
            for declaration in library.declared(family).values():
                declaration.register()
            _registered.add(family)
        finally:
            _registering.discard(family)


def family_of_op(op_name):
    """The family that declares ``op_name``, or None: the imported families first, then each family in turn."""
    for family in FAMILIES:
        if op_name in library.declared(family):
            return family
    for family in FAMILIES:
        importlib.import_module(family)
        if op_name in library.declared(family):
            return family
    return None


def op_families():
    """{op name: family} of every declared op (imports every family)."""
    for family in FAMILIES:
        importlib.import_module(family)
    return {name: family for family in FAMILIES for name in library.declared(family)}


def register_all():
    """Register every family's ops now (tests; a process that wants them all before its first compile)."""
    for family in FAMILIES:
        register(family)


class _FamilyImportingNamespace(_OpNamespace):
    # _OpNamespace names each op's module after the class's module; torch.compile's code generation
    # finds ops again by that name, so it must be torch.ops.kernelkiln as for a plain namespace.
    __module__ = "torch.ops"

    def __getattr__(self, op_name):
        # Only a first lookup gets here: _OpNamespace caches the op packet as an instance attribute.
        family = family_of_op(op_name) if not op_name.startswith("_") else None
        if family is None:
            return super().__getattr__(op_name)
        register(family)  # imports the family and registers its ops
        with _lock:
            # Another thread's lookup (or the registration's own, see register) may have cached the packet
            # since this one missed the cache: return that one, so each op keeps a single packet.
            packet = self.__dict__.get(op_name)
            return packet if packet is not None else super().__getattr__(op_name)


def install():
    if not isinstance(torch.ops.__dict__.get(NAMESPACE), _FamilyImportingNamespace):
        setattr(torch.ops, NAMESPACE, _FamilyImportingNamespace(NAMESPACE))
