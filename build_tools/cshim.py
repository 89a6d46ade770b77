"""Small C libraries the lowering process loads into itself (build_tools/z3memo.c, build_tools/archtrace.c).

Each is compiled with the host C compiler once per source digest, into the user cache, and loaded with
RTLD_GLOBAL before TileLang, so that the entry points it defines take over TileLang's and TVM's calls of them.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


class ShimError(RuntimeError):
    pass


def digest(source):
    return hashlib.sha256(Path(source).read_bytes()).hexdigest()[:16]


def tilelang_loaded():
    """Whether TileLang's or TVM's compiler library is already loaded (its references are then bound)."""
    try:
        with open("/proc/self/maps") as f:
            return any("libtvm_compiler" in line or "libtilelang" in line for line in f)
    except OSError:
        return "tvm" in sys.modules or "tilelang.lib" in sys.modules


def compiled(source, off_switch, libs=("-ldl",)):
    """Path of the shared library built from ``source``; ``off_switch`` (e.g. "KERNELKILN_Z3_MEMO=off") is named
    in the errors as the way to lower without it."""
    source = Path(source)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelkiln" / source.stem
    flags = hashlib.sha256(" ".join(libs).encode()).hexdigest()[:8]
    out = base / f"{source.stem}-{digest(source)}-{flags}.so"
    if out.exists():
        return out
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise ShimError(f"no C compiler (cc, gcc or $CC) to build {source.name}; install one or set {off_switch}")
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        so = Path(tmp) / out.name
        try:
            r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(so), str(source), *libs],
                               capture_output=True, text=True)
            failed = r.stderr[-2000:] if r.returncode != 0 else None
        except OSError as e:
            failed = str(e)
        if failed is not None:
            raise ShimError(f"{cc} failed on {source}:\n{failed}\nset {off_switch} to lower without it")
        os.replace(so, out)  # atomic: concurrent lowering processes may compile it at once
    return out
