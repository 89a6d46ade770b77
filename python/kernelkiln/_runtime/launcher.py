"""Load a cubin per device and launch its kernels from a launch spec.

Hot path per call: evaluate the grid (one compiled lambda), pack the grid, stream
and arguments with one ``struct`` call, one ctypes call. Two launch paths, chosen at import:

* the native shim ``libkernelkiln_launch.so`` (csrc/launch_shim.c, built into the
  wheel): builds CUlaunchConfig and kernelParams on the C stack from that one packed
  buffer, so ctypes converts two arguments per call (no argtypes: a c_void_p and bytes);
* pure ctypes (fallback, or KERNELKILN_LAUNCHER=ctypes): per-thread parameter and
  config buffers filled with ``struct.pack_into``, then ``cuLaunchKernelEx``.

Launch plans (an op's repeated call with the same sizes and options) go further through
``CompiledKernel.bound_launcher``: the arguments that do not change are packed once into a
template, and a call packs only its own values (pointers, token count, grid), which the shim
patches into a copy of the template.

Everything else (module load, function lookup, max-dynamic-smem attribute,
attribute arrays, struct layouts) happens once per (kernel, device).
"""
import ctypes
import hashlib
import operator
import os
import struct
import threading
from pathlib import Path

from kernelkiln._runtime import driver as drv
from kernelkiln._runtime.expr import compile_tuple

# device-argument kinds -> (struct code, size, alignment)
_SCALAR_LAYOUT = {
    "ptr": ("Q", 8, 8), "int32": ("i", 4, 4), "uint32": ("I", 4, 4), "int64": ("q", 8, 8),
    "uint64": ("Q", 8, 8), "float32": ("f", 4, 4), "float64": ("d", 8, 8),
}
_TENSORMAP_BYTES, _TENSORMAP_ALIGN = 128, 64
_CONFIG = struct.Struct("<7I4xQQI4x")  # CUlaunchConfig
_ATTR_BYTES = 72  # CUlaunchAttribute: id, pad, 64-byte value union


class LaunchError(RuntimeError):
    pass


class _ShimKernel(ctypes.Structure):
    """Mirror of csrc/launch_shim.c:tk_kernel."""
    _fields_ = [("launch_ex", ctypes.c_void_p), ("function", ctypes.c_void_p), ("block", ctypes.c_uint * 3),
                ("smem", ctypes.c_uint), ("attrs", ctypes.c_void_p * 2), ("num_attrs", ctypes.c_uint * 2),
                ("num_args", ctypes.c_int), ("offsets", ctypes.c_uint16 * 64)]


_TEMPLATE_VALUES, _TEMPLATE_BLOB = 64, 1024


class _ShimTemplate(ctypes.Structure):
    """Mirror of csrc/launch_shim.c:tk_template."""
    _fields_ = [("size", ctypes.c_uint), ("num_values", ctypes.c_uint), ("dst", ctypes.c_uint16 * _TEMPLATE_VALUES),
                ("src", ctypes.c_uint16 * _TEMPLATE_VALUES), ("bytes", ctypes.c_uint8 * _TEMPLATE_VALUES),
                ("blob", ctypes.c_ubyte * _TEMPLATE_BLOB)]


def _load_shim():
    """(tk_launch_packed, tk_launch_template) of the native shim; None for each that is missing or mismatched."""
    path = Path(__file__).with_name("libkernelkiln_launch.so")
    if os.environ.get("KERNELKILN_LAUNCHER", "auto") == "ctypes" or not path.exists():
        return None, None
    try:
        lib = ctypes.CDLL(str(path))
        fn = lib.tk_launch_packed
    except (OSError, AttributeError):  # a shim of another platform or an older build: ctypes serves every launch
        return None, None
    if lib.tk_kernel_size() != ctypes.sizeof(_ShimKernel) or lib.tk_head_bytes() != _SHIM_HEAD.size:
        return None, None  # a mismatched build: fall back rather than corrupt launches
    fn.restype = ctypes.c_int  # argtypes stay unset: a c_void_p and a bytes object pass without conversion
    template = getattr(lib, "tk_launch_template", None)
    if template is None or lib.tk_template_size() != ctypes.sizeof(_ShimTemplate):
        return fn, None
    template.restype = ctypes.c_int
    return fn, template


# csrc/launch_shim.c:tk_head, packed in front of the kernel arguments: grid x/y/z, pdl, stream.
_SHIM_HEAD = struct.Struct("<3IiQ")
_shim_launch, _shim_launch_template = _load_shim()
LAUNCH_PATH = "shim" if _shim_launch else "ctypes"


def _aligned_buffer(size, align=64):
    raw = (ctypes.c_ubyte * (size + align))()
    addr = ctypes.addressof(raw)
    return raw, addr + (-addr) % align


class _ArgLayout:
    """Byte layout of one kernel's parameter buffer, in device order."""

    def __init__(self, args):
        fmt, offset, self.offsets, self.sources, self.tensormap_slots = ["<"], 0, [], [], []
        self.slots = {}  # PrimFunc index of a scalar or pointer argument -> (byte offset, struct code, size, align)
        for a in args:
            if a["kind"] == "tensormap":
                code, size, align = None, _TENSORMAP_BYTES, _TENSORMAP_ALIGN
            else:
                code, size, align = _SCALAR_LAYOUT["ptr" if a["kind"] == "ptr" else a["ctype"]]
            pad = (-offset) % align
            fmt.append("x" * pad)
            offset += pad
            self.offsets.append(offset)
            if code is None:
                fmt.append(f"{size}x")  # filled by cuTensorMapEncodeTiled in place
                self.tensormap_slots.append((offset, a["desc"]))
            else:
                fmt.append(code)
                self.sources.append(a["param"])
                self.slots[a["param"]] = (offset, code, size, align)
            offset += size
        self.size = max(offset, 8)
        self.struct = struct.Struct("".join(fmt))


class _ThreadState:
    """Per-thread buffers: params, kernelParams pointer array, config, attrs."""

    def __init__(self, layout, attr_sets):
        self.params_raw, self.params = _aligned_buffer(layout.size)
        self.params_view = (ctypes.c_ubyte * layout.size).from_address(self.params)
        self.ptrs = (ctypes.c_void_p * max(len(layout.offsets), 1))(*[self.params + o for o in layout.offsets])
        self.config_raw, self.config = _aligned_buffer(_CONFIG.size, 8)
        self.config_view = (ctypes.c_ubyte * _CONFIG.size).from_address(self.config)
        self.attrs = _attr_arrays(attr_sets)


def _attr_arrays(attr_sets):
    """{pdl: (buffer, address, count)}: CUlaunchAttribute arrays, built once."""
    out = {}
    for key, attrs in attr_sets.items():
        buf = (ctypes.c_ubyte * max(_ATTR_BYTES * len(attrs), 1))()
        for i, (attr_id, value) in enumerate(attrs):
            struct.pack_into("<I4x", buf, i * _ATTR_BYTES, attr_id)
            struct.pack_into(f"<{len(value)}I", buf, i * _ATTR_BYTES + 8, *value)
        out[key] = (buf, ctypes.addressof(buf), len(attrs))
    return out


class DeviceKernel:
    """One __global__ of a loaded module on one device."""

    def __init__(self, kspec, function, param_names, tensormaps=None):
        self.symbol = kspec["symbol"]
        self.function = function
        self.layout = _ArgLayout(kspec["args"])
        self.grid = compile_tuple(kspec["grid"], param_names)
        self.grid_exprs, self.param_names = kspec["grid"], param_names
        self.block = tuple(kspec["block"])
        self.smem = kspec["dyn_smem_bytes"]
        base = []
        if kspec.get("cluster_dims"):
            base.append((drv.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, tuple(kspec["cluster_dims"])))
        if kspec.get("cooperative"):
            base.append((drv.CU_LAUNCH_ATTRIBUTE_COOPERATIVE, (1,)))
        pdl = [(drv.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, (1,))] if kspec.get("pdl") else []
        self.attr_sets = {False: base, True: base + pdl}
        self.tls = threading.local()
        # TMA descriptors hold the tensor's address and sizes, so they are encoded per call.
        self.tensormaps = [(offset, _TensorMapEncoder(tensormaps[desc], param_names))
                           for offset, desc in self.layout.tensormap_slots]
        if _shim_launch is not None and len(self.layout.offsets) <= 64 and not self.layout.tensormap_slots:
            self._shim = self._shim_descriptor()
            self.launch = self._launch_shim
        else:
            self.launch = self._launch_ctypes

    def _shim_descriptor(self):
        d = _ShimKernel()
        d.launch_ex = ctypes.cast(drv.get_driver().cuLaunchKernelEx, ctypes.c_void_p).value
        d.function = self.function
        d.block[:] = self.block
        d.smem = self.smem
        self._shim_attrs = _attr_arrays(self.attr_sets)  # read-only, so all threads share them
        for pdl in (False, True):
            _, addr, n = self._shim_attrs[pdl]
            d.attrs[int(pdl)], d.num_attrs[int(pdl)] = addr, n
        d.num_args = len(self.layout.offsets)
        d.offsets[:d.num_args] = self.layout.offsets
        self._shim_ptr = ctypes.c_void_p(ctypes.addressof(d))
        # head + arguments in one struct (the layout's offsets are relative to the end of the head,
        # which is 8-byte aligned, so its alignment padding stays valid)
        self.packed = struct.Struct(_SHIM_HEAD.format + self.layout.struct.format.lstrip("<"))
        self.pick = _picker(self.layout.sources)
        return d

    def bound(self, fixed, varying, on_error):
        """``go(stream, values, pdl)`` for a launch plan: every argument is ``fixed[i]`` (PrimFunc order) except
        those at the indices ``varying``, which take ``values`` (a tuple in that order) per call. The shim copies a
        template packed once here and patches the values in, so a call packs only the head and its values.
        None where this kernel cannot use the template (no shim, TMA descriptors, too many arguments).
        ``on_error(grid, stream, args, pdl, rc)`` handles a failed launch, with the full arguments."""
        if _shim_launch_template is None or getattr(self, "_shim", None) is None:
            return None
        lay = self.layout
        used = [k for k, i in enumerate(varying) if i in lay.slots]  # values the kernel reads (not only the grid)
        if len(used) > _TEMPLATE_VALUES or lay.size > _TEMPLATE_BLOB:
            return None
        tpl = _ShimTemplate()
        template_args = list(fixed)
        for i in varying:
            template_args[i] = 0  # patched per call
        blob = lay.struct.pack(*[template_args[i] for i in lay.sources])
        tpl.size = len(blob)
        ctypes.memmove(ctypes.addressof(tpl) + _ShimTemplate.blob.offset, blob, len(blob))
        # the values' struct: natural alignment after the (8-byte aligned) head, in the order of `used`
        fmt, offset = [], 0
        for n, k in enumerate(used):
            dst, code, size, align = lay.slots[varying[k]]
            pad = (-offset) % align
            fmt.append("x" * pad + code)
            offset += pad
            tpl.dst[n], tpl.src[n], tpl.bytes[n] = dst, offset, size
            offset += size
        tpl.num_values = len(used)
        pack = struct.Struct(_SHIM_HEAD.format + "".join(fmt)).pack
        pick = _picker(used) if len(used) < len(varying) else None
        grid_of = compile_tuple(self.grid_exprs, [self.param_names[i] for i in varying],
                                {self.param_names[i]: v for i, v in enumerate(fixed) if i not in set(varying)})
        launch, kptr, tptr = _shim_launch_template, self._shim_ptr, ctypes.c_void_p(ctypes.addressof(tpl))

        def failed(grid, stream, values, pdl, rc):
            on_error(grid, stream, merge_args(fixed, varying, values), pdl, rc)

        if pick is None:
            def go(stream, values, pdl):
                grid = grid_of(values)
                if grid[0] > 0 and grid[1] > 0 and grid[2] > 0:
                    rc = launch(kptr, tptr, pack(*grid, pdl, stream, *values))
                    if rc:
                        failed(grid, stream, values, pdl, rc)
        else:
            def go(stream, values, pdl):
                grid = grid_of(values)
                if grid[0] > 0 and grid[1] > 0 and grid[2] > 0:
                    rc = launch(kptr, tptr, pack(*grid, pdl, stream, *pick(values)))
                    if rc:
                        failed(grid, stream, values, pdl, rc)

        go.template = tpl  # the shim reads it at every call: it lives as long as the launcher
        return go

    def _launch_shim(self, grid, stream, args, pdl):
        return _shim_launch(self._shim_ptr, self.packed.pack(*grid, pdl, stream, *self.pick(args)))

    def _launch_ctypes(self, grid, stream, args, pdl):
        st = self.state()
        lay = self.layout
        lay.struct.pack_into(st.params_view, 0, *[args[i] for i in lay.sources])
        for offset, encoder in self.tensormaps:
            encoder.encode(st.params + offset, args)
        _, attrs_addr, nattrs = st.attrs[pdl]
        _CONFIG.pack_into(st.config_view, 0, grid[0], grid[1], grid[2], *self.block, self.smem, stream,
                          attrs_addr, nattrs)
        return drv.get_driver().cuLaunchKernelEx(st.config, self.function, st.ptrs, None)

    def state(self):
        try:
            return self.tls.s
        except AttributeError:
            self.tls.s = _ThreadState(self.layout, self.attr_sets)
            return self.tls.s


def merge_args(fixed, varying, values):
    """The full PrimFunc-ordered arguments of a plan call: ``fixed`` with ``values`` at the indices ``varying``."""
    out = list(fixed)
    for i, v in zip(varying, values):
        out[i] = v
    return tuple(out)


def _picker(sources):
    """args -> the tuple of args[i] for i in sources, as one C-level call."""
    if not sources:
        return lambda args: ()
    if len(sources) == 1:
        i = sources[0]
        return lambda args: (args[i],)
    return operator.itemgetter(*sources)


class _TensorMapEncoder:
    """cuTensorMapEncodeTiled for one descriptor of the spec, straight into the parameter buffer."""

    def __init__(self, tm, param_names):
        self.tm = tm
        self.rank = tm["rank"]
        self.dims = compile_tuple(tm["global_dim"], param_names)
        self.strides = compile_tuple(tm["global_stride_bytes"], param_names) if tm["global_stride_bytes"] else None
        self.box = compile_tuple(tm["box_dim"], param_names)
        self.elem = compile_tuple(tm["element_strides"], param_names)

    def encode(self, address, args):
        r = self.rank
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        dims = (u64 * r)(*self.dims(args))
        strides = (u64 * max(r - 1, 1))(*(self.strides(args) if self.strides else (0,)))
        box = (u32 * r)(*self.box(args))
        elem = (u32 * r)(*self.elem(args))
        tm = self.tm
        d = drv.get_driver()
        rc = d.cuTensorMapEncodeTiled(address, tm["dtype_enum"], r, args[tm["param"]], dims, strides, box, elem,
                                      tm["interleave"], tm["swizzle"], tm["l2_promotion"], tm["oob_fill"])
        if rc:
            raise LaunchError(f"cuTensorMapEncodeTiled(dims={list(dims)}, box={list(box)}): {d.error_text(rc)}")


# (cubin path, sha256, device) -> CUmodule. The variants of one compile unit share a cubin
# (build_tools/units.py), so its module is read, checked and loaded once per device for all of them.
_MODULES = {}
_MODULES_LOCK = threading.Lock()


class CompiledKernel:
    """A cubin + spec; modules load lazily per device, under a lock, once."""

    def __init__(self, entry, cubin_path):
        self.entry = entry
        self.spec = entry["spec"]
        self.cubin_path = cubin_path
        self.param_names = [p["name"] for p in self.spec["params"]]
        # the PrimFunc's own parameters (buffers and scalars), in order; "symbol" params (a buffer's extent) follow
        # them in the spec and are never passed by the ops
        self.arg_names = tuple(p["name"] for p in self.spec["params"] if p["kind"] != "symbol")
        self._named = operator.itemgetter(*self.arg_names) if len(self.arg_names) > 1 else \
            (lambda args, n=self.arg_names[0] if self.arg_names else None: (args[n],))
        self._devices = {}
        self._lock = threading.Lock()

    def _read_cubin(self):
        with open(self.cubin_path, "rb") as f:
            image = f.read()
        digest = hashlib.sha256(image).hexdigest()
        if digest != self.entry["sha256"]:
            raise LaunchError(f"{self.cubin_path}: sha256 {digest} does not match the index "
                              f"({self.entry['sha256']}); the installation is corrupt, reinstall kernelkiln")
        return image

    def load(self, device_index):
        """Load the module into the device's primary context (idempotent)."""
        kernels = self._devices.get(device_index)
        if kernels is not None:
            return kernels
        with self._lock:
            kernels = self._devices.get(device_index)
            if kernels is None:
                kernels = self._load_locked(device_index)
                self._devices[device_index] = kernels
        return kernels

    def _load_locked(self, device_index):
        d = drv.get_driver()
        ctx = d.primary_context(device_index)
        pushed = d.current_context() != ctx
        if pushed:
            d.check(d.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
        try:
            module = self._module(d, device_index)
            out = []
            for k in self.spec["kernels"]:
                fn = ctypes.c_void_p()
                d.check(d.cuModuleGetFunction(ctypes.byref(fn), module, k["symbol"].encode()),
                        f"cuModuleGetFunction({k['symbol']})")
                if k["dyn_smem_bytes"]:
                    d.check(d.cuFuncSetAttribute(fn, drv.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                 k["dyn_smem_bytes"]), "setting max dynamic shared memory")
                cluster = k.get("cluster_dims") or [1]
                if cluster[0] * (cluster[1] if len(cluster) > 1 else 1) * (cluster[2] if len(cluster) > 2 else 1) > 8:
                    d.check(d.cuFuncSetAttribute(fn, drv.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                            "allowing a non-portable cluster size")
                out.append(DeviceKernel(k, fn.value, self.param_names, self.spec.get("tensormaps") or {}))
        finally:
            if pushed:
                d.check(d.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent")
        return (ctx, out)

    def _module(self, d, device_index):
        """The cubin's module in the current (primary) context, shared by every kernel of the cubin."""
        key = (str(self.cubin_path), self.entry["sha256"], device_index)
        with _MODULES_LOCK:
            module = _MODULES.get(key)
            if module is None:
                image = self._read_cubin()
                module = ctypes.c_void_p()
                d.check(d.cuModuleLoadData(ctypes.byref(module), image), f"loading {self.cubin_path}")
                _MODULES[key] = module
        return module

    def bind(self, *values):
        """Launch arguments from PrimFunc-ordered values: tensors for buffers (their data
        pointers, and their sizes/strides for the buffers' shape symbols), numbers for scalars."""
        params = self.spec["params"]
        out = [v.data_ptr() if p["kind"] == "buffer" else v for p, v in zip(params, values)]
        for p in params[len(values):]:
            t = values[p["param"]]
            out.append(t.shape[p["dim"]] if "dim" in p else t.stride(p["stride"]))
        return tuple(out)

    def bind_named(self, args):
        """The PrimFunc-ordered launch arguments from ``args``, a mapping of every argument name to its value."""
        if len(args) != len(self.arg_names):
            raise self._name_error(args)
        try:
            return self._named(args)
        except KeyError:
            raise self._name_error(args) from None

    def _name_error(self, names):
        missing = [n for n in self.arg_names if n not in names]
        unknown = [n for n in names if n not in self.arg_names]
        return LaunchError(f"{self.entry.get('key', self.spec.get('key'))}: the launch arguments are "
                           f"{list(self.arg_names)}; missing {missing}, unknown {unknown}")

    def launch(self, device_index, stream, args, pdl=False):
        """Launch every kernel of the module; ``args`` are in PrimFunc parameter order
        (data pointers as ints)."""
        ctx, kernels = self.load(device_index)
        for k in kernels:
            grid = k.grid(args)
            if grid[0] <= 0 or grid[1] <= 0 or grid[2] <= 0:
                continue
            rc = k.launch(grid, stream, args, pdl)
            if rc:
                self._retry_in_context(ctx, k, grid, stream, args, pdl, rc)

    def launcher_for(self, device_index):
        """``go(stream, args, pdl)`` bound to one device: the launch plans' hot path, without
        the per-call module lookup and kernel loop of ``launch``."""
        ctx, kernels = self.load(device_index)
        if len(kernels) != 1:
            return lambda stream, args, pdl: self.launch(device_index, stream, args, pdl)
        k = kernels[0]
        grid_of, retry = k.grid, self._retry_in_context
        if k.launch == k._launch_shim:  # the common case, inlined: one pack, one ctypes call
            pack, pick, kptr, shim = k.packed.pack, k.pick, k._shim_ptr, _shim_launch

            def go(stream, args, pdl):
                grid = grid_of(args)
                if grid[0] > 0 and grid[1] > 0 and grid[2] > 0:
                    rc = shim(kptr, pack(*grid, pdl, stream, *pick(args)))
                    if rc:
                        retry(ctx, k, grid, stream, args, pdl, rc)

            return go
        launch = k.launch

        def go(stream, args, pdl):
            grid = grid_of(args)
            if grid[0] > 0 and grid[1] > 0 and grid[2] > 0:
                rc = launch(grid, stream, args, pdl)
                if rc:
                    retry(ctx, k, grid, stream, args, pdl, rc)

        return go

    def bound_launcher(self, device_index, fixed, varying):
        """``go(stream, values, pdl)`` for a launch plan on one device: the arguments are ``fixed`` (PrimFunc order)
        except those at the indices ``varying``, which take ``values`` per call (DeviceKernel.bound). Only the
        per-call values are packed: a plan's call packs 5-8 values instead of every argument."""
        ctx, kernels = self.load(device_index)
        fixed, varying = tuple(fixed), tuple(varying)
        if len(kernels) == 1:
            k = kernels[0]
            retry = self._retry_in_context
            go = k.bound(fixed, varying, lambda grid, stream, args, pdl, rc: retry(ctx, k, grid, stream, args, pdl, rc))
            if go is not None:
                return go
        launch = self.launcher_for(device_index)
        return lambda stream, values, pdl: launch(stream, merge_args(fixed, varying, values), pdl)

    def bound_launcher_named(self, device_index, fixed, varying):
        """``bound_launcher`` with the arguments by name: ``fixed`` maps every argument that is not in ``varying``
        (a tuple of names: the per-call values' order) to its value. The names are resolved here, once per plan."""
        given = set(fixed) | set(varying)
        if given != set(self.arg_names) or set(fixed) & set(varying) or len(set(varying)) != len(varying):
            raise self._name_error(list(fixed) + [n for n in varying if n not in fixed])
        full = tuple(fixed.get(n, 0) for n in self.arg_names)
        return self.bound_launcher(device_index, full, tuple(self.arg_names.index(n) for n in varying))

    @staticmethod
    def _retry_in_context(ctx, k, grid, stream, args, pdl, rc):
        d = drv.get_driver()
        if rc == drv.CUDA_ERROR_INVALID_CONTEXT or d.current_context() != ctx:
            # This thread has no (or another device's) current context: launch inside ours.
            d.check(d.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
            try:
                rc = k.launch(grid, stream, args, pdl)
            finally:
                d.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        if rc:
            raise LaunchError(f"launching {k.symbol} grid={grid} block={k.block}: {d.error_text(rc)}")
