"""The installed kernel store: ``kernelkiln/_kernels/index.json`` plus one cubin per variant and arch.

Nothing is written at run time, so read-only installs work. Nothing is read at import: a
kernel lookup parses only runtime/<op>.<arch>.json (index.json, the full build record, is read
only by tools such as ``kernelkiln info`` and ``preload``). With KERNELKILN_JIT=1 a missing
variant is built into a per-user cache instead of failing (kernelkiln._jit, the JIT fallback: it lives
outside the loader, which imports it only when it is switched on).
"""
import contextlib
import gc
import json
import os
import threading
from pathlib import Path

from kernelkiln._runtime import driver as drv
from kernelkiln._runtime.launcher import CompiledKernel

# compute capability -> the arch token our cubins are built for
ARCH_OF_CAPABILITY = {(9, 0): "sm_90a", (10, 0): "sm_100a"}
_DEFAULT_DIR = Path(__file__).resolve().parent.parent / "_kernels"


def _jit():
    """The JIT fallback module (kernelkiln._jit) when KERNELKILN_JIT=1, else None."""
    if os.environ.get("KERNELKILN_JIT", "0") != "1":
        return None
    from kernelkiln import _jit as jit
    return jit


def _jit_cache_root():
    from kernelkiln import _jit as jit
    return jit.cache_root()


class MissingSpecializationError(ValueError):
    """No precompiled variant matches the call."""


class UnsupportedDeviceError(RuntimeError):
    pass


@contextlib.contextmanager
def _gc_paused():
    """Parsing an index allocates thousands of containers, which can trigger a full cyclic collection
    of the process (torch's object graph: ~80 ms in a cProfile of the index parse on the 2-core CPU build
    machine, commit after 6978d42). Nothing here makes cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _fmt_params(names, values):
    return ", ".join(f"{n}={v!r}" for n, v in zip(names, values))


class KernelStore:
    def __init__(self, directory=None):
        self.directory = Path(directory or os.environ.get("KERNELKILN_KERNEL_DIR") or _DEFAULT_DIR)
        self._index = None
        self._by_key = {}
        self._kernels = {}
        self._lock = threading.Lock()
        self._device_arch = {}
        self._split = {}  # (op, arch) -> entries of runtime/<op>.<arch>.json
        self._arches = None

    @property
    def index(self):
        if self._index is None:
            with self._lock:
                if self._index is None:
                    path = self.directory / "index.json"
                    if not path.exists() and _jit():  # everything on demand (e.g. a source checkout)
                        self._index = {"arches": [], "variants": []}
                        return self._index
                    if not path.exists():
                        raise MissingSpecializationError(
                            f"no kernel index at {path}: this kernelkiln installation has no compiled kernels. "
                            "Install a wheel from the release, or build one with `pip wheel .` (see README)")
                    with _gc_paused(), open(path) as f:
                        index = json.load(f)
                        for e in index["variants"]:
                            self._by_key[(e["op"], e["arch"], frozenset(e["variant"].items()))] = e
                    self._index = index
        return self._index

    def _runtime_entries(self, op, arch):
        """Entries of one (op, arch) from runtime/<op>.<arch>.json, parsed on first use; stores without the
        split (older builds, JIT caches) fall back to the full index."""
        key = (op, arch)
        entries = self._split.get(key)
        if entries is None:
            path = self.directory / "runtime" / f"{op}.{arch}.json"
            if not path.exists():
                entries = [e for e in self.index["variants"] if e["op"] == op and e["arch"] == arch]
            with _gc_paused():
                if path.exists():
                    with open(path) as f:
                        entries = json.load(f)
                with self._lock:
                    for e in entries:
                        self._by_key.setdefault((e["op"], e["arch"], frozenset(e["variant"].items())), e)
                    self._split[key] = entries
        return entries

    def arches(self):
        if self._arches is None:
            path = self.directory / "runtime" / "summary.json"
            if path.exists():
                with open(path) as f:
                    self._arches = list(json.load(f)["arches"])
            else:
                self._arches = list(self.index["arches"])
        return list(self._arches)

    def variants(self, op=None, arch=None):
        return [e for e in self.index["variants"] if (op is None or e["op"] == op) and (arch is None or e["arch"] == arch)]

    def device_arch(self, device_index):
        arch = self._device_arch.get(device_index)
        if arch is None:
            d = drv.get_driver()
            cc = (d.attribute(drv.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_index),
                  d.attribute(drv.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_index))
            arch = ARCH_OF_CAPABILITY.get(cc)
            if arch is None or (arch not in self.arches() and not _jit()):
                raise UnsupportedDeviceError(
                    f"GPU {device_index} has compute capability {cc[0]}.{cc[1]}; this kernelkiln build has kernels for "
                    f"{self.arches()} (sm_90a = H100/H200, sm_100a = B200)")
            self._device_arch[device_index] = arch
        return arch

    def kernel(self, op, param_names, values, device_index):
        """The CompiledKernel for (op, compile-time values) on a device, or a clear error."""
        arch = self.device_arch(device_index)
        key = (op, arch, tuple(values))
        k = self._kernels.get(key)
        if k is not None:
            return k
        self._runtime_entries(op, arch)
        entry, directory = self._by_key.get((op, arch, frozenset(zip(param_names, values)))), self.directory
        if entry is None:
            jit = _jit()
            if jit is None:
                raise self.missing(op, arch, param_names, values)
            # built by the AOT pipeline in a subprocess into the JIT cache (once per node, under a file
            # lock); CompiledKernel checks the cubin's sha256 against that store's index on load
            entry, directory = jit.build(op, arch, param_names, values)
        with self._lock:
            k = self._kernels.get(key)
            if k is None:
                k = CompiledKernel(entry, directory / entry["cubin"])
                self._kernels[key] = k
        return k

    def has_variant(self, op, param_names, values, device_index):
        arch = self.device_arch(device_index)
        self._runtime_entries(op, arch)
        return (op, arch, frozenset(zip(param_names, values))) in self._by_key

    def missing(self, op, arch, param_names, values):
        built = [tuple(e["variant"][n] for n in param_names) for e in self._runtime_entries(op, arch)]
        listing = "\n  ".join(_fmt_params(param_names, b) for b in sorted(built, key=str)[:40]) or "(none)"
        more = f"\n  ... and {len(built) - 40} more" if len(built) > 40 else ""
        table = "\n".join(f"{n} = [{v!r}]".replace("'", '"').replace("True", "true").replace("False", "false")
                          for n, v in zip(param_names, values))
        return MissingSpecializationError(
            f"no precompiled {op} kernel for {_fmt_params(param_names, values)} on {arch}.\n"
            f"Built {op} variants for {arch}:\n  {listing}{more}\n"
            f"To build it, add to a manifest (e.g. a copy of manifests/default.toml):\n[[{op}]]\n{table}\n"
            f"then build a wheel from the source tree: "
            f"KERNELKILN_MANIFEST=/path/to/manifest.toml pip wheel . --no-deps -w dist\n"
            f"or set KERNELKILN_JIT=1 (with tilelang and nvcc installed) to build missing variants on first use "
            f"into {_jit_cache_root()}")


_store = None


def store():
    global _store
    if _store is None:
        _store = KernelStore()
    return _store
