"""Pure-PyTorch references that define KernelKiln's numerics (oracles for the kernels).

Imports only torch, so it works on machines without tilelang or a GPU. Each reference module lists its public names
in ``__all__``; this package re-exports them, loading a module on the first access of one of its names (PEP 562), so
a caller that needs one helper does not import every reference. The map of names to modules is derived from the
modules themselves (the first access of an unknown name imports them in turn), not kept by hand.
"""
import importlib
import pkgutil

_MODULES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))
_where = {}  # public name -> module, for the modules imported so far


def _load(module):
    mod = importlib.import_module(f"{__name__}.{module}")
    for name in getattr(mod, "__all__", ()):
        _where.setdefault(name, module)
    if module in getattr(mod, "__all__", ()):
        # v1's per_channel_cast_fused is a module and its function: the import just bound the module here, the
        # function is what callers of kernelkiln.torch.<name> expect (as in the peer, whose __init__ rebinds it)
        globals()[module] = getattr(mod, module)
    return mod


def __getattr__(name):
    if name == "__all__":
        for module in _MODULES:
            _load(module)
        value = sorted(_where)
    else:
        module = _where.get(name)
        if module is None:
            for candidate in _MODULES:
                if name in getattr(_load(candidate), "__all__", ()):
                    module = candidate
                    break
            else:
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    for module in _MODULES:
        _load(module)
    return sorted(set(globals()) | set(_where))


# A module whose name is also its function's, bound to the function now (as the peer's package does at import), so
# that importing the submodule first cannot leave the module where callers expect the function.
_load("per_channel_cast_fused")
