"""Remembered Z3 answers for TileLang's lowering (build_tools/z3memo.c, docs/LOWERING.md §4).

``activate()`` compiles the interposer with the host C compiler (once per source digest, into the user cache) and
loads it with RTLD_GLOBAL, which must happen before TileLang's libraries are loaded in the process: TVM binds its
Z3 references when it is loaded. ``clear()`` forgets the remembered answers (lower.py calls it before each variant).
``state()`` names what the lowering of this process will use; the build cache keys every lowering on it.

KERNELKILN_Z3_MEMO=off lowers without it (Z3 then solves every query; the kernels are the same, only slower).
"""
import ctypes
import importlib.util
import os
from pathlib import Path

from build_tools import cshim

SOURCE = Path(__file__).with_name("z3memo.c")
_lib = None


class Z3MemoError(RuntimeError):
    pass


def enabled():
    return os.environ.get("KERNELKILN_Z3_MEMO", "on").lower() not in ("off", "0", "no")


def _digest():
    return cshim.digest(SOURCE)


def _tilelang_loaded():
    return cshim.tilelang_loaded()


def state():
    """'z3memo-<digest>' if this process lowers (or will lower) with remembered answers, else 'off'."""
    if _lib is not None:
        return f"z3memo-{_digest()}"
    if not enabled() or _tilelang_loaded():
        return "off"
    return f"z3memo-{_digest()}"


def _libz3():
    spec = importlib.util.find_spec("z3")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for name in ("libz3.so", "libz3.dylib"):
            if (Path(root) / "lib" / name).is_file():
                return Path(root) / "lib" / name
    raise Z3MemoError("the z3 package's libz3 was not found (TileLang depends on z3-solver); "
                      "set KERNELKILN_Z3_MEMO=off to lower without remembered Z3 answers")


def _compiled():
    try:
        return cshim.compiled(SOURCE, "KERNELKILN_Z3_MEMO=off", ("-ldl", "-lpthread"))
    except cshim.ShimError as e:
        raise Z3MemoError(str(e)) from None


def activate():
    """Load the interposer into this process if enabled and still possible; returns state()."""
    global _lib
    if _lib is not None or not enabled() or _tilelang_loaded():
        return state()
    lib = ctypes.CDLL(str(_compiled()), mode=ctypes.RTLD_GLOBAL)
    rc = lib.z3memo_init(str(_libz3()).encode())
    if rc != 0:
        raise Z3MemoError(f"z3memo_init failed ({rc}): the libz3 at {_libz3()} lacks an entry point it needs")
    _lib = lib
    return state()


def clear():
    if _lib is not None:
        _lib.z3memo_clear()


def counts():
    """(checks, answered from memory) since the process started; (0, 0) when not active."""
    if _lib is None:
        return 0, 0
    buf = (ctypes.c_long * 2)()
    _lib.z3memo_counts(buf)
    return buf[0], buf[1]
