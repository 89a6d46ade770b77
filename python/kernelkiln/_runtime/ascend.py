"""Load Ascend kernel binaries per device and launch them through the CANN runtime (kernelkiln._runtime.acl).

The Ascend twin of launcher.py, smaller: an Ascend kernel takes its arguments as one host buffer
(aclrtLaunchKernelWithHostArgs copies it), so a launch evaluates the block dim, packs the arguments with one
``struct`` call and makes one ctypes call. Everything else (reading the binary and checking its sha256,
aclrtBinaryLoadFromData, aclrtBinaryGetFunction, the launch config) happens once per (kernel, device), under a
lock. Nothing is written to disk: the binary goes from the store's file to ACL as bytes.

Argument layout, as the CANN runtime reads ``hostArgs`` (the tilelang wheel's Ascend module packs the same way): the
kernel's arguments in device order, each at an offset aligned to max(its natural alignment, 4), the buffer's size
rounded up to 8 bytes. Pointers are 8 bytes.
"""
import contextlib
import ctypes
import hashlib
import operator
import struct
import threading

from kernelkiln._runtime import acl as acl_mod
from kernelkiln._runtime.expr import compile_tuple
from kernelkiln._runtime.launcher import LaunchError

# kind or ctype -> (struct code, size, natural alignment)
_ACL_SCALARS = {
    "ptr": ("Q", 8, 8), "handle": ("Q", 8, 8),
    "int8": ("b", 1, 1), "int16": ("h", 2, 2), "int32": ("i", 4, 4), "int64": ("q", 8, 8),
    "uint8": ("B", 1, 1), "uint16": ("H", 2, 2), "uint32": ("I", 4, 4), "uint64": ("Q", 8, 8),
    "bool": ("b", 1, 1), "float32": ("f", 4, 4), "float64": ("d", 8, 8),
}
_MIN_ALIGN, _BUFFER_ALIGN = 4, 8
_ATTR = struct.Struct("<i16s")  # aclrtLaunchKernelAttr: id, then the 16-byte value union (uint32 reserved[4])
_CFG = struct.Struct("<QQ")  # aclrtLaunchKernelCfg: attrs pointer, numAttrs


class AclArgLayout:
    """Byte layout of one kernel's host argument buffer; ``sources[i]`` is the launch-argument index of slot i."""

    def __init__(self, args):
        fmt, offset, self.offsets, self.sizes, self.sources = ["<"], 0, [], [], []
        for a in args:
            kind = a["kind"]
            key = "ptr" if kind in ("ptr", "buffer", "handle") else a["ctype"]
            if key not in _ACL_SCALARS:
                raise LaunchError(f"Ascend kernel argument {a} has a type the loader cannot pass ({key})")
            code, size, align = _ACL_SCALARS[key]
            align = max(align, _MIN_ALIGN)
            pad = (-offset) % align
            fmt.append("x" * pad + code)
            offset += pad
            self.offsets.append(offset)
            self.sizes.append(size)
            self.sources.append(a["param"])
            offset += size
        tail = (-offset) % _BUFFER_ALIGN
        fmt.append("x" * tail)
        self.size = offset + tail
        self.struct = struct.Struct("".join(fmt))
        self.pick = operator.itemgetter(*self.sources) if len(self.sources) > 1 else \
            (lambda args, i=self.sources[0] if self.sources else None: (args[i],) if i is not None else ())


class _LaunchConfig:
    """An aclrtLaunchKernelCfg holding the dynamic Unified Buffer size, built once; None where a kernel needs none."""

    def __init__(self, dyn_ubuf_bytes):
        self.attr = ctypes.create_string_buffer(_ATTR.pack(acl_mod.ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE,
                                                           struct.pack("<I12x", dyn_ubuf_bytes)), _ATTR.size)
        self.cfg = ctypes.create_string_buffer(_CFG.pack(ctypes.addressof(self.attr), 1), _CFG.size)
        self.address = ctypes.addressof(self.cfg)


class AscendDeviceKernel:
    """One kernel function of a loaded binary on one device."""

    def __init__(self, kspec, function, param_names):
        self.symbol = kspec["symbol"]
        self.function = function
        self.layout = lay = AclArgLayout(kspec["args"])
        # the store records where each argument goes (docs/ASCEND.md); a spec this loader would pack differently is
        # refused rather than launched with shifted arguments
        recorded = [(a.get("offset"), a.get("size")) for a in kspec["args"]]
        if any(r != (None, None) for r in recorded) or "args_bytes" in kspec:
            if recorded != list(zip(lay.offsets, lay.sizes)) or kspec.get("args_bytes") != lay.size:
                raise LaunchError(
                    f"{self.symbol}: the store's argument layout (offset, size) {recorded}, {kspec.get('args_bytes')} "
                    f"bytes differs from the loader's {list(zip(lay.offsets, lay.sizes))}, {lay.size} bytes; this "
                    "kernelkiln cannot launch that Ascend store (rebuild it with this version)")
        self.block_dim_expr = kspec["block_dim"]
        self.block_dim = compile_tuple([kspec["block_dim"]], param_names)
        self.dyn_ubuf_bytes = int(kspec.get("dyn_ubuf_bytes") or 0)
        self.config = _LaunchConfig(self.dyn_ubuf_bytes) if self.dyn_ubuf_bytes else None

    def pack(self, args):
        return self.layout.struct.pack(*self.layout.pick(args))


# (binary path, sha256, device) -> (binary handle, image). The image stays referenced as long as the handle.
_BINARIES = {}
_BINARIES_LOCK = threading.Lock()


@contextlib.contextmanager
def on_device(acl, device):
    """Make ``device`` the calling thread's current ACL device for the block (ACL loads binaries into, and launches
    on streams of, the current device), then restore the previous one."""
    previous = acl.current_device()
    if previous == device:
        yield
        return
    acl.set_device(device)
    try:
        yield
    finally:
        if previous is not None:
            acl.set_device(previous)


class AscendKernel:
    """An Ascend binary + its launch spec; binaries load lazily per device, under a lock, once."""

    def __init__(self, entry, binary_path):
        self.entry = entry
        self.spec = entry["spec"]
        self.binary_path = binary_path
        params = self.spec["params"]
        self.param_names = [p["name"] for p in params]
        # every parameter is passed by name, shape symbols too (a launch has data pointers, not tensors, to read a
        # symbol from; the op knows each value)
        self.arg_names = tuple(self.param_names)
        self._named = operator.itemgetter(*self.arg_names) if len(self.arg_names) > 1 else \
            (lambda args, n=self.arg_names[0] if self.arg_names else None: (args[n],))
        first = self.spec["kernels"][0]
        # which cores the block dim counts: "vector" (AIV), "cube" (AIC) or "mix" (whole AI cores)
        self.core_type = first.get("core_type", "vector")
        self._work_items = compile_tuple([first["work_items"]], self.param_names) if first.get("work_items") else None
        self._devices = {}
        self._lock = threading.Lock()

    def _read_binary(self):
        try:
            with open(self.binary_path, "rb") as f:
                image = f.read()
        except OSError as e:
            raise LaunchError(f"{self.binary_path}: the Ascend binary of {self.entry.get('key', self.entry['op'])} "
                              f"cannot be read ({e}); the installation is incomplete, reinstall kernelkiln") from None
        digest = hashlib.sha256(image).hexdigest()
        if digest != self.entry["sha256"]:
            raise LaunchError(f"{self.binary_path}: sha256 {digest} does not match the index "
                              f"({self.entry['sha256']}); the installation is corrupt, reinstall kernelkiln")
        return image

    def load(self, device):
        """The binary's kernels on ``device`` (an NPU index), loaded on first use (idempotent, thread-safe)."""
        kernels = self._devices.get(device)
        if kernels is not None:
            return kernels
        with self._lock:
            kernels = self._devices.get(device)
            if kernels is None:
                acl = acl_mod.get_acl()
                with on_device(acl, device):
                    binary = self._binary(acl, device)
                    kernels = []
                    for k in self.spec["kernels"]:
                        fn = ctypes.c_void_p()
                        acl.check(acl.aclrtBinaryGetFunction(binary, k["symbol"].encode(), ctypes.byref(fn)),
                                  f"aclrtBinaryGetFunction({k['symbol']}) in {self.binary_path}")
                        kernels.append(AscendDeviceKernel(k, fn.value, self.param_names))
                self._devices[device] = kernels
        return kernels

    def _binary(self, acl, device):
        """The binary handle on ``device``; the kernels of one binary share it."""
        key = (str(self.binary_path), self.entry["sha256"], device)
        with _BINARIES_LOCK:
            found = _BINARIES.get(key)
            if found is None:
                image = self._read_binary()
                handle = ctypes.c_void_p()
                acl.check(acl.aclrtBinaryLoadFromData(image, len(image), None, ctypes.byref(handle)),
                          f"aclrtBinaryLoadFromData({self.binary_path}, {len(image)} bytes) on npu:{device}")
                found = _BINARIES[key] = (handle.value, image)
        return found[0]

    def num_cores(self, args, available):
        """The block dim to pass as ``num_cores`` for the launch arguments ``args`` (PrimFunc order; its
        ``num_cores`` slot is not read): ``max(1, min(available, work items))`` (docs/ASCEND.md), where
        ``available`` is the device's count of the cores the kernel runs on (``core_type``)."""
        if self._work_items is None:
            return max(1, available)
        return max(1, min(available, self._work_items(args)[0]))

    def bind_named(self, args):
        """The launch arguments in PrimFunc order from ``args``, a mapping of every argument name to its value."""
        if len(args) != len(self.arg_names):
            raise self._name_error(args)
        try:
            return self._named(args)
        except KeyError:
            raise self._name_error(args) from None

    def bind_from(self, values):
        """The launch arguments in PrimFunc order, taken by name from ``values`` (which may hold more names: an op
        passes what it knows of the call; every argument of this kernel must be among them)."""
        try:
            return self._named(values)
        except KeyError:
            raise self._name_error([n for n in self.arg_names if n in values]) from None

    def _name_error(self, names):
        missing = [n for n in self.arg_names if n not in names]
        unknown = [n for n in names if n not in self.arg_names]
        return LaunchError(f"{self.entry.get('key', self.entry['op'])} (Ascend): the launch arguments are "
                           f"{list(self.arg_names)}; missing {missing}, unknown {unknown}")

    def launch(self, device, stream, args):
        """Launch every kernel of the binary on ``device``'s ``stream`` (an aclrtStream handle); ``args`` are the
        launch arguments in PrimFunc order (data pointers as ints)."""
        kernels = self.load(device)
        acl = acl_mod.get_acl()
        with on_device(acl, device):
            for k in kernels:
                (blocks,) = k.block_dim(args)
                if blocks <= 0:
                    continue
                if blocks >= 1 << 32:
                    raise LaunchError(f"{k.symbol}: block dim {blocks} exceeds the uint32 range")
                packed = k.pack(args)
                rc = acl.aclrtLaunchKernelWithHostArgs(k.function, blocks, stream,
                                                       k.config.address if k.config else None,
                                                       packed, len(packed), None, 0)
                if rc:
                    raise LaunchError(f"launching {k.symbol} (Ascend) with block dim {blocks}, dynamic UB "
                                      f"{k.dyn_ubuf_bytes} bytes on npu:{device}: "
                                      f"aclrtLaunchKernelWithHostArgs failed: {acl.error_text(rc)}")


# --------------------------------------------------------------------------------------------- the Ascend store
# docs/ASCEND.md "Store format": <dir>/runtime/summary.json, <dir>/runtime/<op>.<arch>.json, <dir>/<stem>.<arch>.aibin

# SoC names (aclrtGetSocName) -> the Ascend target token our binaries are built for (bisheng --npu-arch)
_ARCH_OF_SOC_PREFIX = (("Ascend950", "dav-3510"), ("Ascend910_95", "dav-3510"))
BUILD = ("build the Ascend store on a machine with the CANN toolkit >= 9.2 (bisheng and CCE ld.lld: set "
         "ASCEND_HOME_PATH or BISHENG_HOME) with `python -m build_tools build` (docs/ASCEND.md) and point "
         "KERNELKILN_ASCEND_KERNEL_DIR at it")
HOW_TO_BUILD = f"install the kernelkiln-ascend wheel of this release, or {BUILD}"


class AscendStoreError(RuntimeError):
    """No Ascend binaries for this call: none installed, none compiled, or not this op / variant / NPU."""


def arch_of_soc(soc_name):
    for prefix, arch in _ARCH_OF_SOC_PREFIX:
        if soc_name and soc_name.startswith(prefix):
            return arch
    return None


def _default_directories(cuda_store_dir):
    """Where an Ascend store may be, in the loader's order (docs/ASCEND.md): $KERNELKILN_ASCEND_KERNEL_DIR, the
    installed kernelkiln_ascend package's _kernels/ (found without importing it), the CUDA store's ascend/."""
    import importlib.util
    import os
    from pathlib import Path
    override = os.environ.get("KERNELKILN_ASCEND_KERNEL_DIR")
    if override:
        return [Path(override)]
    out = []
    try:
        spec = importlib.util.find_spec("kernelkiln_ascend")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        out.append(Path(list(spec.submodule_search_locations)[0]) / "_kernels")
    out.append(Path(cuda_store_dir) / "ascend")
    return out


class AscendStore:
    """The installed Ascend kernels: summary, per-(op, arch) entries read on first use, kernels per variant."""

    def __init__(self, directories):
        self.directories = [d for d in directories]
        self._directory = None
        self._summary = None
        self._split = {}
        self._by_key = {}
        self._kernels = {}
        self._device_arch = {}
        self._lock = threading.Lock()

    @property
    def directory(self):
        """The first of the candidate directories that holds an Ascend store, else None."""
        if self._directory is None:
            for d in self.directories:
                if (d / "runtime" / "summary.json").is_file() or (d / "index.json").is_file():
                    self._directory = d
                    break
        return self._directory

    def summary(self):
        """runtime/summary.json (or, in older layouts, the index's head); ``{"status": "absent"}`` where there is no
        Ascend store at all."""
        if self._summary is None:
            import json
            d = self.directory
            if d is None:
                self._summary = {"status": "absent", "arches": [], "ops": []}
            else:
                path = d / "runtime" / "summary.json"
                with open(path if path.is_file() else d / "index.json") as f:
                    s = json.load(f)
                s.pop("variants", None)
                s.pop("lowered", None)
                self._summary = s
        return self._summary

    def arches(self):
        s = self.summary()
        return list(s.get("arches") or []) if s.get("status", "built") == "built" else []

    def _unavailable(self, what):
        s = self.summary()
        if s.get("status") == "absent":
            where = ", ".join(str(d) for d in self.directories)
            return AscendStoreError(f"{what}: this kernelkiln installation has no Ascend binaries (no Ascend store "
                                    f"in {where}). To run on an Ascend NPU, {HOW_TO_BUILD}.")
        if s.get("status", "built") != "built":
            return AscendStoreError(
                f"{what}: the Ascend store in {self.directory} was lowered but not compiled "
                f"({s.get('reason') or s.get('status')}), so it holds no Ascend binaries. To run on an Ascend NPU, "
                f"{HOW_TO_BUILD}.")
        return None

    def device_arch(self, device, acl=None):
        """The Ascend target of NPU ``device``, or a clear error where this store has no binaries for it."""
        arch = self._device_arch.get(device)
        if arch is None:
            problem = self._unavailable(f"npu:{device}")
            if problem is not None:
                raise problem
            acl = acl or acl_mod.get_acl()
            with on_device(acl, device):
                soc = acl.soc_name()
            arch = arch_of_soc(soc)
            if arch is None or arch not in self.arches():
                from kernelkiln._runtime.artifacts import UnsupportedDeviceError
                raise UnsupportedDeviceError(
                    f"npu:{device} is a {soc or 'NPU of unknown SoC'} ({arch or 'no known target'}); this kernelkiln "
                    f"build has Ascend kernels for {self.arches()} (dav-3510 = Ascend 950)")
            self._device_arch[device] = arch
        return arch

    def _runtime_entries(self, op, arch):
        entries = self._split.get((op, arch))
        if entries is None:
            import json
            path = self.directory / "runtime" / f"{op}.{arch}.json"
            entries = []
            if path.is_file():
                with open(path) as f:
                    entries = json.load(f)
            with self._lock:
                for e in entries:
                    self._by_key.setdefault((e["op"], e["arch"], frozenset(e["variant"].items())), e)
                self._split[(op, arch)] = entries
        return entries

    def kernel(self, op, param_names, values, device):
        """The AscendKernel of (op, Ascend compile-time values) on NPU ``device``, or a clear error."""
        arch = self.device_arch(device)
        key = (op, arch, tuple(values))
        k = self._kernels.get(key)
        if k is not None:
            return k
        self._runtime_entries(op, arch)
        entry = self._by_key.get((op, arch, frozenset(zip(param_names, values))))
        if entry is None:
            raise self.missing(op, arch, param_names, values)
        with self._lock:
            k = self._kernels.get(key)
            if k is None:
                k = self._kernels[key] = AscendKernel(entry, self.directory / entry["binary"])
        return k

    def missing(self, op, arch, param_names, values):
        built = [tuple(e["variant"].get(n) for n in param_names) for e in self._runtime_entries(op, arch)]
        fmt = lambda vs: ", ".join(f"{n}={v!r}" for n, v in zip(param_names, vs))  # noqa: E731
        listing = "\n  ".join(fmt(b) for b in sorted(built, key=str)[:40]) or "(none)"
        ops = self.summary().get("ops") or []
        return AscendStoreError(
            f"no Ascend {op} kernel for {fmt(values)} on {arch} in {self.directory}.\n"
            f"Built Ascend {op} variants for {arch}:\n  {listing}\n"
            f"Ops with Ascend kernels in this store: {ops or '(none)'}.\n"
            f"To add it, name it in a manifest's Ascend targets and {BUILD}.")


_ascend_store = None


def store(cuda_store_dir=None):
    """The process-wide AscendStore (its directory is found on first use, never at import)."""
    global _ascend_store
    if _ascend_store is None:
        if cuda_store_dir is None:
            from kernelkiln._runtime.artifacts import store as cuda_store
            cuda_store_dir = cuda_store().directory
        _ascend_store = AscendStore(_default_directories(cuda_store_dir))
    return _ascend_store


def reset_store():
    """Forget the process's Ascend store (tests; a process that changed KERNELKILN_ASCEND_KERNEL_DIR)."""
    global _ascend_store
    _ascend_store = None
