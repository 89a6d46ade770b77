"""Opt-in JIT fallback: build a missing specialization on this machine, once per node.

Off unless ``KERNELKILN_JIT=1``. A missing (op, arch, parameters) is then built by the same
AOT pipeline the wheel uses (``python -m build_tools build`` with a one-variant manifest) in a
SUBPROCESS, so TileLang/TVM never load into the caller's process. Each variant gets its own
small kernel store (index.json + cubin) under the JIT cache directory:

    $KERNELKILN_JIT_CACHE (default ~/.cache/kernelkiln/jit/<kernelkiln version>/)
        <op>-<arch>-<hash>/            one finished store per variant (appears atomically)
        .locks/<op>-<arch>-<hash>.lock fcntl lock: one process on the node builds, the others wait
        .tmp-*/                        a build in progress (renamed into place when complete)

The build sources are the wheel's ``kernelkiln/_jit_src`` (kernels/ + build_tools/), or the
source tree when running from a checkout. Needs tilelang and nvcc (pip install -r
requirements/build.txt, or the wheels pinned in pyproject.toml's build requirements).
"""
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_PKG = Path(__file__).resolve().parent  # .../kernelkiln


class JitError(RuntimeError):
    """The JIT fallback is enabled but cannot build (no toolchain, unwritable cache, build failure)."""


def enabled():
    return os.environ.get("KERNELKILN_JIT", "0") == "1"


def _version():
    try:
        return importlib.metadata.version("kernelkiln")
    except importlib.metadata.PackageNotFoundError:
        import kernelkiln
        return kernelkiln.__version__


def cache_root():
    configured = os.environ.get("KERNELKILN_JIT_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "kernelkiln" / "jit" / _version()


def source_root():
    """Directory holding kernels/ and build_tools/: the wheel's copy, else the source checkout's."""
    for root in (_PKG / "_jit_src", _PKG.parent.parent):
        if (root / "build_tools" / "__main__.py").is_file() and (root / "kernels").is_dir():
            return root
    return None


def _nvcc_findable():
    if os.environ.get("KERNELKILN_NVCC") or shutil.which("nvcc"):
        return True
    if os.environ.get("CUDA_HOME") and os.path.exists(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")):
        return True
    try:
        return any(str(f).endswith("bin/nvcc") for f in importlib.metadata.files("nvidia-cuda-nvcc") or [])
    except importlib.metadata.PackageNotFoundError:
        return False


def toolchain_problem():
    """Why the JIT cannot build here, or None. Looks up tilelang without importing it."""
    if source_root() is None:
        return "this installation carries no build sources (kernelkiln/_jit_src is missing)"
    if importlib.util.find_spec("tilelang") is None:
        return "tilelang is not installed (pip install tilelang==0.1.15)"
    if not _nvcc_findable():
        return "nvcc was not found (pip install nvidia-cuda-nvcc nvidia-cuda-cccl, or set KERNELKILN_NVCC)"
    return None


def variant_name(op, arch, param_names, values):
    ident = json.dumps([op, arch, list(param_names), [v for v in values]], sort_keys=True)
    return f"{op}-{arch}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a TOML basic string


def manifest_text(op, arch, param_names, values):
    lines = ["# one-variant manifest written by kernelkiln's JIT fallback", "[build]", f'arches = ["{arch}"]', "",
             f"[[{op}]]"]
    lines += [f"{n} = [{_toml_value(v)}]" for n, v in zip(param_names, values)]
    return "\n".join(lines) + "\n"


def lookup(op, arch, param_names, values, root=None):
    """(index entry, store dir) of a finished JIT build, or None."""
    d = (root or cache_root()) / variant_name(op, arch, param_names, values)
    try:
        index = json.loads((d / "index.json").read_text())
    except (OSError, ValueError):
        return None
    want = dict(zip(param_names, values))
    for e in index.get("variants", []):
        if e["op"] == op and e["arch"] == arch and e["variant"] == want:
            return e, d
    return None


def _check_writable(root):
    try:
        root.mkdir(parents=True, exist_ok=True)
        (root / ".locks").mkdir(exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".probe-"):
            pass
    except OSError as e:
        raise JitError(f"KERNELKILN_JIT=1 but the JIT cache directory {root} is not usable ({e.strerror or e}); "
                       "set KERNELKILN_JIT_CACHE to a writable directory") from None


@contextlib.contextmanager
def _locked(path):
    """Exclusive fcntl lock on ``path``: released when the holder exits, even if it dies."""
    import fcntl
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run_build(src, manifest, out_dir, gen_dir, arch):
    """The AOT pipeline in a subprocess, with the build sources first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # ninja/nvcc from this environment's scripts dir even when it is not on PATH
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    cmd = [sys.executable, "-m", "build_tools", "build", "--manifest", str(manifest), "--arches", arch,
           "--out-dir", str(out_dir), "--gen-dir", str(gen_dir), "-j", str(min(4, os.cpu_count() or 1))]
    return subprocess.run(cmd, cwd=str(src), env=env, capture_output=True, text=True)


def build(op, arch, param_names, values, root=None, runner=None):
    """Build (op, arch, values) into the JIT cache unless present; returns (index entry, store dir).

    Many processes may ask at once: the first takes the variant's lock and builds into a temp
    dir that is renamed into place when complete; the others wait on the lock, then find it."""
    root = Path(root or cache_root())
    found = lookup(op, arch, param_names, values, root)
    if found:
        return found
    problem = toolchain_problem()
    if problem:
        raise JitError(f"KERNELKILN_JIT=1 cannot build {op} for {arch}: {problem}")
    _check_writable(root)
    name = variant_name(op, arch, param_names, values)
    with _locked(root / ".locks" / f"{name}.lock"):
        found = lookup(op, arch, param_names, values, root)  # built by another process while we waited
        if found:
            return found
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".tmp-{name}-"))
        try:
            (tmp / "manifest.toml").write_text(manifest_text(op, arch, param_names, values))
            r = (runner or _run_build)(source_root(), tmp / "manifest.toml", tmp / "store", tmp / "gen", arch)
            if r.returncode != 0:
                tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-40:])
                raise JitError(f"KERNELKILN_JIT build of {op} for {arch} failed:\n{tail}")
            # the store appears whole or not at all: rename is atomic within one filesystem
            if (root / name).exists():  # an unreadable leftover (we hold the lock, lookup failed)
                shutil.rmtree(root / name)
            os.replace(tmp / "store", root / name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    found = lookup(op, arch, param_names, values, root)
    if not found:
        raise JitError(f"KERNELKILN_JIT build of {op} for {arch} produced no matching kernel in {root / name}")
    return found
