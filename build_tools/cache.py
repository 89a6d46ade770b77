"""Content-addressed build cache: lowered sources and cubins keyed on what determines them.

Keys hash contents, never paths or timestamps: the kernel module's source, the
kernels/common modules it imports (transitively), the extractor sources, the variant's parameters, the arch, the toolchain
versions and the nvcc flags. A rebuild in another directory, a CMake wheel build
and ``python -m build_tools build`` all share one cache, so an unchanged kernel is
lowered and compiled once per machine. Writes are atomic (temp file + rename).

Location: $KERNELKILN_BUILD_CACHE, else ~/.cache/kernelkiln/build; KERNELKILN_BUILD_CACHE=off disables it.
"""
import functools
import hashlib
import importlib.metadata
import os
import re
import tempfile
from pathlib import Path

CACHE_VERSION = "1"
_ROOT = Path(__file__).resolve().parent.parent
# Sources every lowering depends on besides the kernel's own module.
_SHARED_SOURCES = ("build_tools/spec.py", "build_tools/lower.py", "build_tools/z3memo.c", "build_tools/archshare.py",
                   "build_tools/archtrace.c", "build_tools/frontend_memo.py")


def cache_dir():
    configured = os.environ.get("KERNELKILN_BUILD_CACHE")
    if configured == "off":
        return None
    return Path(configured) if configured else Path.home() / ".cache" / "kernelkiln" / "build"


@functools.cache
def _shared_digest():
    h = hashlib.sha256()
    for p in (_ROOT / p for p in _SHARED_SOURCES):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(importlib.metadata.version("tilelang").encode())
    return h.hexdigest()


_COMMON_IMPORT = re.compile(r"kernels\.common(?:\.(\w+)|\s+import\s+\(?([\w, \n]+))")
# constants a kernel takes from its op's contract module (``from kernelkiln_contract.engram import ...``)
_CONTRACT_IMPORT = re.compile(r"kernelkiln_contract\.(\w+)")


def _common_deps(source, seen=None):
    """The kernels/common modules a kernel source imports, transitively (sorted paths).

    Only these enter the kernel's key, so editing one shared helper rebuilds the kernels
    that use it and no others."""
    seen = set() if seen is None else seen
    for m in _COMMON_IMPORT.finditer(source):
        # "from kernels.common import a as b, c" names modules a and c
        names = [m.group(1)] if m.group(1) else [n.split()[0] for n in m.group(2).split(",") if n.strip()]
        for name in names:
            path = _ROOT / "kernels" / "common" / f"{name}.py"
            if name and path not in seen and path.exists():
                seen.add(path)
                _common_deps(path.read_text(), seen)
    return sorted(seen)


def lower_key(variant, arch, module_file):
    from build_tools import z3memo
    h = hashlib.sha256(f"lower:{CACHE_VERSION}:{variant.key}:{arch}:{_shared_digest()}:{z3memo.state()}".encode())
    source = Path(module_file).read_bytes()
    h.update(source)
    for dep in _common_deps(source.decode()):
        h.update(b"\0" + dep.name.encode() + b"\0" + dep.read_bytes())
    for name in sorted(set(_CONTRACT_IMPORT.findall(source.decode()))):
        dep = _ROOT / "python" / "kernelkiln_contract" / f"{name}.py"
        h.update(b"\0contract:" + name.encode() + b"\0" + dep.read_bytes())
    return h.hexdigest()


def cubin_key(cu_text, arch, nvcc_version, flags):
    h = hashlib.sha256(f"cubin:{CACHE_VERSION}:{arch}:{nvcc_version}:{' '.join(flags)}:".encode())
    h.update(importlib.metadata.version("tilelang").encode())  # the included templates
    h.update(cu_text.encode() if isinstance(cu_text, str) else cu_text)
    return h.hexdigest()


def get(key, name):
    d = cache_dir()
    if d is None:
        return None
    path = d / key[:2] / key / name
    return path.read_bytes() if path.exists() else None


def has(key, name):
    """Whether ``get(key, name)`` would return the entry (without reading it)."""
    d = cache_dir()
    return d is not None and (d / key[:2] / key / name).exists()


def put(key, name, data):
    d = cache_dir()
    if d is None:
        return
    folder = d / key[:2] / key
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    os.replace(tmp, folder / name)
