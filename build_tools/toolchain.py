"""Where the build finds nvcc and the TileLang headers, and the exact nvcc command.

No system CUDA is required: the pinned ``nvidia-cuda-nvcc`` / ``nvidia-cuda-cccl``
wheels (build requirements in pyproject.toml) provide nvcc. Search order:
$KERNELKILN_NVCC, the nvidia-cuda-nvcc distribution, $CUDA_HOME/bin/nvcc, PATH.
"""
import contextlib
import fcntl
import functools
import importlib.metadata
import os
import re
import shutil
import subprocess
from pathlib import Path

# Release flags: no -lineinfo (2.6x larger cubins and it embeds source paths).
NVCC_FLAGS = ("--cubin", "-O3", "-std=c++20", "-w", "-Xcudafe", "--diag_suppress=177")

# nvcc names internal-linkage objects (e.g. cuda::std's customization-point objects, which some TileLang templates
# pull into a unit) after a hash of the source file's absolute path: one unit compiled from two directories gives
# two different cubins. Every compile therefore reads its source from one fixed place per unit (the unit's file
# name is content-addressed), so stores built anywhere, in shards or not, are byte-identical. The name is a digest
# of the unit's member variants, not of their source: two builds of different kernel sources on one machine share the
# path, so each copy-and-compile holds the directory's lock (``canonical_lock``), or one build would compile the
# other's source.
CANONICAL_SOURCE_ROOT = Path("/tmp/kernelkiln-nvcc")


def _from_distribution(dist, suffix):
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if str(f).endswith(suffix):
            path = Path(f.locate()).resolve()
            if path.exists():
                return str(path)
    return None


@functools.cache
def find_nvcc():
    candidates = [
        os.environ.get("KERNELKILN_NVCC"),
        _from_distribution("nvidia-cuda-nvcc", "bin/nvcc"),
        os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if os.environ.get("CUDA_HOME") else None,
        shutil.which("nvcc"),
    ]
    for c in candidates:
        if c and os.path.exists(c):
            return c
    raise FileNotFoundError("nvcc not found: pip install nvidia-cuda-nvcc==13.0.88 nvidia-cuda-cccl==13.0.85, "
                            "or set KERNELKILN_NVCC")


@functools.cache
def nvcc_version(nvcc=None):
    out = subprocess.run([nvcc or find_nvcc(), "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release [\d.]+, V([\d.]+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1]


@functools.cache
def tilelang_include_dirs():
    """TileLang's device templates and its bundled CUTLASS (imports tilelang: build time only)."""
    from tilelang.env import CUTLASS_INCLUDE_DIR, TILELANG_TEMPLATE_PATH
    return [TILELANG_TEMPLATE_PATH, CUTLASS_INCLUDE_DIR]


def tilelang_version():
    return importlib.metadata.version("tilelang")


LOCK_NAME = ".lock"


@contextlib.contextmanager
def canonical_lock(directory):
    """Hold the exclusive lock of a canonical-source directory (released when the process dies, too)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOCK_NAME, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield directory
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def canonical_source(cu):
    """A copy of the unit ``cu`` at its fixed path; call it, and compile the copy, under ``canonical_lock`` of
    ``CANONICAL_SOURCE_ROOT / cu.stem``."""
    cu = Path(cu)
    d = CANONICAL_SOURCE_ROOT / cu.stem
    d.mkdir(parents=True, exist_ok=True)
    target = d / cu.name
    tmp = d / f"{cu.name}.{os.getpid()}.tmp"
    tmp.write_bytes(cu.read_bytes())
    os.replace(tmp, target)
    return target


def ninja_nvcc_command(include_flags=None):
    """The ninja rule's command: copy ``$in`` to its fixed path (``canonical_source``, in shell) and compile it there,
    both under flock(1) of the directory's lock file (``canonical_lock``'s, so the Python and the ninja paths
    exclude each other). Ninja's ``$$`` is a literal ``$``: ``$$$$`` is the shell's PID, for a private temporary
    name."""
    d = f"{CANONICAL_SOURCE_ROOT}/$stem"
    compile_cmd = " ".join(nvcc_command(f"{d}/$name", "$out", "$arch", include_flags))
    body = f"cp $in {d}/$name.$$$$.tmp && mv -f {d}/$name.$$$$.tmp {d}/$name && {compile_cmd}"
    if shutil.which("flock") is None:  # no util-linux: unlocked, as before (one build at a time is safe)
        return f"mkdir -p {d} && {body}"
    return f"mkdir -p {d} && flock {d}/{LOCK_NAME} sh -c '{body}'"


def nvcc_command(cu, cubin, arch, include_flags=None):
    """The one nvcc command line of the build (ninja rule, CMake rule via ``build_tools nvcc``).

    ``include_flags``: ``-I<dir>`` strings; default TileLang's template and CUTLASS dirs."""
    incs = include_flags or [f"-I{d}" for d in tilelang_include_dirs()]
    return [find_nvcc(), *NVCC_FLAGS, f"-arch={arch}", *incs, "-o", str(cubin), str(cu)]
