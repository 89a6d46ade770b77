"""What reaches the CUDA driver, recorded on a machine without a GPU.

Runs the public ops on CPU tensors in a process where torch's CUDA entry points and the driver are stand-ins:
the loader loads real launch specs from a kernel store, packs real arguments and launches through the real native
shim (or the ctypes path) into a Python ``cuLaunchKernelEx``. Each launch is recorded as the kernel symbol, grid,
block, dynamic shared memory, launch attributes and the exact bytes of every argument. Device pointers become
labels (which input or output tensor, at which byte offset), so records are the same from run to run.

Used by tests/launch_record/test_launch_record.py, which compares the records with a golden file written before
the runtime was redesigned: a refactor that changes any byte a kernel receives fails it.

    python tests/launch_record/recorder.py --store DIR [--shim LIB] --out records.json
    python tests/launch_record/recorder.py --manifest-from golden.json --out manifests/launch-record.toml

The second form writes the manifest of the variants the golden records launch (found by the variant digest that
ends every kernel symbol), which the test builds for sm_90a.
"""
import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import struct
import sys
from pathlib import Path

FAKE_STREAM = 0x5EED0000
SM_COUNT = 132  # an H200's, so grids that depend on it are those of the GPU run
PACKAGE = "kernelkiln"


class _Properties:
    multi_processor_count = SM_COUNT
    name = "recording stand-in"
    major, minor = 9, 0


def _install_fake_cuda():
    """torch's CUDA calls that the ops make, answered as if one H200 were device 0 (before the package imports)."""
    import torch
    torch._C._cuda_getCurrentRawStream = lambda index: FAKE_STREAM
    torch.cuda.current_device = lambda: 0
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_properties = lambda index=None: _Properties()
    torch.cuda.device = lambda index=None: contextlib.nullcontext()
    torch.cuda.is_current_stream_capturing = lambda: False
    torch.cuda.synchronize = lambda device=None: None

    class _Stream:
        cuda_stream = FAKE_STREAM

        def synchronize(self):
            pass

    torch.cuda.current_stream = lambda device=None: _Stream()
    torch.Tensor.pin_memory = lambda self, *a, **k: self
    real_zeros = torch.zeros

    def zeros(*args, pin_memory=False, **kwargs):
        return real_zeros(*args, **kwargs)

    torch.zeros = zeros
    # torch.empty on the CPU returns whatever memory it gets; fill it so host code that reads an output (none should)
    # sees the same values in every run
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True


_LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_CONFIG = struct.Struct("<7I4xQQI4x")
_ATTR_BYTES = 72


class Recorder:
    """The stand-in driver: module loads hand out handles; launches are decoded into records."""

    def __init__(self):
        self.launches = []
        self.functions = {}  # fake CUfunction -> symbol
        self.kernels = {}  # fake CUfunction -> DeviceKernel (for the argument layout)
        self.func_attributes = []
        self.tensormaps = {}  # address of an encoded descriptor -> its arguments
        self._next = 0x1000
        self.cuLaunchKernelEx = _LAUNCH_T(self._launch)

    # --- the Driver interface the loader uses ------------------------------------------------------------------
    def check(self, code, what):
        if code:
            raise RuntimeError(f"{what} failed in the recording stand-in: {code}")

    def error_text(self, code):
        return f"stand-in error {code}"

    def attribute(self, attr, device):
        return {75: 9, 76: 0, 16: SM_COUNT, 97: 232448}[attr]

    def version(self):
        return 13000

    def primary_context(self, device_ordinal):
        return 0xC0

    def current_context(self):
        return 0xC0

    def cuCtxPushCurrent_v2(self, ctx):
        return 0

    def cuCtxPopCurrent_v2(self, out):
        return 0

    def cuModuleLoadData(self, out, image):
        out._obj.value = self._handle()
        return 0

    def cuModuleGetFunction(self, out, module, name):
        h = self._handle()
        self.functions[h] = name.decode()
        out._obj.value = h
        return 0

    def cuFuncSetAttribute(self, fn, attr, value):
        fn = fn.value if isinstance(fn, ctypes.c_void_p) else fn
        self.func_attributes.append([self.functions.get(fn), attr, value])
        return 0

    def cuTensorMapEncodeTiled(self, address, dtype, rank, global_address, dims, strides, box, elem, interleave,
                               swizzle, l2, oob):
        desc = {"dtype": dtype, "rank": rank, "address": global_address, "dims": list(dims)[:rank],
                "strides": list(strides)[:max(rank - 1, 1)], "box": list(box)[:rank], "elem": list(elem)[:rank],
                "interleave": interleave, "swizzle": swizzle, "l2": l2, "oob": oob}
        # a deterministic 128-byte stand-in for the descriptor, so the argument bytes carry its inputs
        blob = hashlib.sha512(json.dumps({k: v for k, v in desc.items() if k != "address"}).encode()).digest()
        ctypes.memmove(address, blob * 2, 128)
        self.tensormaps[bytes(blob * 2)] = desc
        return 0

    def _handle(self):
        self._next += 0x10
        return self._next

    # --- launches -------------------------------------------------------------------------------------------------
    def _launch(self, config, function, params, extra):
        gx, gy, gz, bx, by, bz, smem, stream, attrs, nattrs = _CONFIG.unpack(ctypes.string_at(config, _CONFIG.size))
        attr_list = []
        for i in range(nattrs):
            raw = ctypes.string_at(attrs + i * _ATTR_BYTES, _ATTR_BYTES)
            attr_id = struct.unpack_from("<I", raw)[0]
            attr_list.append([attr_id, list(struct.unpack_from("<3I", raw, 8))])
        kernel = self.kernels[function]
        ptrs = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        args = []
        for n, a in enumerate(kernel.kspec_args):
            if a["kind"] == "tensormap":
                raw = ctypes.string_at(ptrs[n], 128)
                args.append({"tensormap": dict(self.tensormaps[raw])})
            else:
                size = 8 if a["kind"] == "ptr" else struct.calcsize(_CODES[a["ctype"]])
                raw = ctypes.string_at(ptrs[n], size)
                if a["kind"] == "ptr":
                    args.append({"ptr": struct.unpack("<Q", raw)[0]})
                else:
                    args.append({a["ctype"]: raw.hex()})
        self.launches.append({"symbol": self.functions[function], "grid": [gx, gy, gz], "block": [bx, by, bz],
                              "dyn_smem": smem, "stream": stream == FAKE_STREAM, "attrs": attr_list,
                              "extra": bool(extra), "args": args})
        return 0


_CODES = {"int32": "i", "uint32": "I", "int64": "q", "uint64": "Q", "float32": "f", "float64": "d"}


def _install_driver(recorder, shim):
    pkg = __import__(f"{PACKAGE}._runtime.driver", fromlist=["x"])
    launcher = __import__(f"{PACKAGE}._runtime.launcher", fromlist=["x"])
    artifacts = __import__(f"{PACKAGE}._runtime.artifacts", fromlist=["x"])
    pkg._driver = recorder
    if shim:
        lib = ctypes.CDLL(shim)
        launcher._shim_launch, launcher._shim_launch_template = lib.tk_launch_packed, lib.tk_launch_template
        lib.tk_launch_packed.restype = lib.tk_launch_template.restype = ctypes.c_int
    else:
        launcher._shim_launch = launcher._shim_launch_template = None
    real_init = launcher.DeviceKernel.__init__

    def init(self, kspec, function, param_names, tensormaps=None):
        real_init(self, kspec, function, param_names, tensormaps)
        self.kspec_args = kspec["args"]
        recorder.kernels[function] = self

    launcher.DeviceKernel.__init__ = init
    # the ops' device check accepts the CPU tensors that stand in for CUDA ones (op plumbing moved from _runtime to
    # _ops in the redesign; the golden file was recorded before it)
    for where in ("_ops.checks", "_runtime.checks"):
        try:
            checks = __import__(f"{PACKAGE}.{where}", fromlist=["x"])
        except ImportError:
            continue
        checks.cuda = lambda name, t: None
    # CPU tensors have no device index: the store answers for "device None" as for an H200
    real_arch = artifacts.KernelStore.device_arch

    def device_arch(self, device_index):
        self._device_arch.setdefault(device_index, "sm_90a")
        return real_arch(self, device_index)

    artifacts.KernelStore.device_arch = device_arch


def _tensors(obj, prefix):
    """(label, tensor) of every tensor in a nested return value or input dict."""
    import torch
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else k)


def _labeller(named):
    spans = []
    for label, t in named:
        if t.numel():
            base = t.untyped_storage().data_ptr()
            spans.append((base, base + t.untyped_storage().nbytes(), label, t.data_ptr() - base))
    temps = {}

    def label(ptr):
        if ptr == 0:
            return "null"
        for lo, hi, name, view_off in spans:
            if lo <= ptr < hi:
                return f"{name}+{ptr - lo - view_off}"
        return temps.setdefault(ptr, f"tmp{len(temps)}")

    return label


def _canonical(launches, named):
    label = _labeller(named)
    out = []
    for rec in launches:
        rec = dict(rec)
        args = []
        for a in rec["args"]:
            if "ptr" in a:
                args.append({"ptr": label(a["ptr"])})
            elif "tensormap" in a:
                tm = dict(a["tensormap"])
                tm["address"] = label(tm["address"])
                args.append({"tensormap": tm})
            else:
                args.append(a)
        rec["args"] = args
        out.append(rec)
    return out


def record(store, shim, cases_filter=None):
    _install_fake_cuda()
    os.environ[f"{PACKAGE.upper()}_KERNEL_DIR"] = str(store)
    recorder = Recorder()
    _install_driver(recorder, shim)
    import torch
    pkg = __import__(PACKAGE)
    artifacts = __import__(f"{PACKAGE}._runtime.artifacts", fromlist=["x"])
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import cases
    results = {}
    for case in cases.CASES:
        if cases_filter and case.name not in cases_filter:
            continue
        torch.manual_seed(0)
        inputs = case.inputs()
        named = list(_tensors(inputs, "in"))
        calls = []
        try:
            for _ in range(case.calls):
                recorder.launches = []
                out = case.run(pkg, **inputs)
                calls.append(_canonical(recorder.launches, named + list(_tensors(out, "out"))))
        except artifacts.MissingSpecializationError as e:
            results[case.name] = {"missing": str(e).splitlines()[0]}
            continue
        except Exception as e:  # a case that cannot run is a bug of the case or of the op: it fails the test
            results[case.name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        results[case.name] = {"calls": calls}
    # what the loader set on the kernels it loaded (max dynamic shared memory, non-portable cluster sizes)
    results["_function_attributes"] = sorted({tuple(a) for a in recorder.func_attributes})
    # every kernel the loader looked up, launched or not (a plan loads each variant it may launch)
    results["_loaded_kernels"] = sorted(set(recorder.functions.values()))
    return results


def write_manifest(golden_path, out, default_manifest):
    """The manifest of every variant the records of ``golden_path`` launch, each one table."""
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    from build_tools import manifest
    _, variants = manifest.load(default_manifest)
    by_digest = {v.stem.rsplit("-", 1)[1]: v for v in variants}
    golden = json.loads(Path(golden_path).read_text())
    needed = {}
    for symbol in golden["_loaded_kernels"]:
        v = by_digest[symbol.rsplit("_", 1)[1]]
        needed[v.key] = v

    def toml(value):
        return ("true" if value else "false") if isinstance(value, bool) else \
            f'"{value}"' if isinstance(value, str) else str(value)

    lines = ["# The variants the launch recorder's cases use (tests/launch_record/cases.py), built for sm_90a only by its",
             "# test: the recorder replays the launches against their launch specs. Regenerate with",
             "# `python tests/launch_record/recorder.py --manifest-from tests/launch_record/golden.json --out THIS_FILE`.",
             "[build]", 'arches = ["sm_90a"]', ""]
    for key, v in sorted(needed.items()):
        lines += [f"[[{v.op}]]", *(f"{n} = [{toml(x)}]" for n, x in v.params), ""]
    Path(out).write_text("\n".join(lines))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store")
    p.add_argument("--manifest-from", help="a golden file: write the manifest of its variants to --out instead")
    p.add_argument("--default-manifest", default=str(Path(__file__).resolve().parents[2] / "manifests" / "default.toml"))
    p.add_argument("--shim", default="", help="the native launch shim (.so); empty: the ctypes launch path")
    p.add_argument("--out", required=True)
    p.add_argument("--case", action="append", help="only these cases")
    p.add_argument("--python", help="the package's source directory to import")
    p.add_argument("--package", default=PACKAGE, help="its import name (the golden file was recorded as tilekiln, "
                   "the project's name before the rename)")
    a = p.parse_args(argv)
    globals()["PACKAGE"] = a.package
    if a.manifest_from:
        return write_manifest(a.manifest_from, a.out, a.default_manifest)
    if not a.store:
        p.error("--store is required")
    if a.python:
        sys.path.insert(0, a.python)
    results = record(a.store, a.shim, a.case)
    Path(a.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
