"""A family package's public names, gathered from its op modules instead of listed by hand.

A family's ``__init__.py`` is two lines::

    from kernelkiln._ops.family import export_ops
    __all__ = export_ops(__name__, globals())

Every module of the package (``_engram_hash.py``, ``_engram_gate_fwd.py``, ...) declares what it makes public in
its ``__all__``; ``export_ops`` imports each one, copies those names into the package and returns them, in module
order. A new op is one new module and no line elsewhere. Two modules exporting one name is an error, not a silent
override.
"""
import importlib
import pkgutil
import sys


def export_ops(package, namespace):
    """Import every module of ``package`` (skipping subpackages), put the names of their ``__all__`` into
    ``namespace`` and return the list of those names."""
    path = sys.modules[package].__path__
    exported, owner = [], {}
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if info.ispkg:
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for name in getattr(module, "__all__", ()):
            if name in owner:
                raise RuntimeError(f"{package}.{name} is exported by both {owner[name]} and {module.__name__}")
            owner[name] = module.__name__
            namespace[name] = getattr(module, name)
            exported.append(name)
    return exported
