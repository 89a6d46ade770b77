"""Thin ctypes binding of the CANN runtime (libascendcl.so), opened at first use: the Ascend twin of driver.py.

No link-time CANN dependency: importing kernelkiln never opens it, and a machine without CANN fails only when an NPU
call is made, with an error that names what is missing. Only the entry points the Ascend loader needs
(kernelkiln._runtime.ascend) and the device queries of kernelkiln.config; their ABI is the one the CANN runtime
documents (aclrtBinaryLoadFromData, aclrtBinaryGetFunction, aclrtLaunchKernelWithHostArgs, aclrtGetDevice,
aclrtSetDevice, aclrtGetDeviceInfo, aclGetRecentErrMsg) and the tilelang wheel's own ACL stub library exports.

The library is found as the tilelang stub finds it: ``KERNELKILN_ASCENDCL`` (a path; tests point it at a recording
stand-in) or else ``libascendcl.so`` on the loader path (CANN's set_env.sh sets LD_LIBRARY_PATH; a copy torch_npu
already mapped is reused by its soname), then ``$ASCEND_HOME_PATH`` / ``$ASCEND_TOOLKIT_HOME`` /
``/usr/local/Ascend/ascend-toolkit/latest`` under ``lib64`` and ``runtime/lib64``.
"""
import ctypes
import os
import threading

ACL_SUCCESS = 0
ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE = 2  # aclrtLaunchKernelAttrId: dynamic Unified Buffer bytes of a launch
# aclrtDevAttr (aclrtGetDeviceInfo) and aclDeviceInfo (aclGetDeviceCapability, older CANN)
ACL_DEV_ATTR_AICORE_CORE_NUM = 101
ACL_DEV_ATTR_CUBE_CORE_NUM = 102
ACL_DEV_ATTR_VECTOR_CORE_NUM = 201
ACL_DEVICE_INFO_AI_CORE_NUM = 0
ACL_DEVICE_INFO_VECTOR_CORE_NUM = 1

# The codes a loader can meet, by name (CANN's aclError table); others print as their number.
ERROR_NAMES = {
    100000: "ACL_ERROR_INVALID_PARAM", 100001: "ACL_ERROR_UNINITIALIZE", 100002: "ACL_ERROR_REPEAT_INITIALIZE",
    100039: "ACL_ERROR_COMPILING_STUB_MODE", 200000: "ACL_ERROR_BAD_ALLOC", 200001: "ACL_ERROR_API_NOT_SUPPORT",
    200002: "ACL_ERROR_INVALID_DEVICE", 200005: "ACL_ERROR_INVALID_RESOURCE_HANDLE",
    200006: "ACL_ERROR_FEATURE_UNSUPPORTED", 107000: "ACL_ERROR_RT_PARAM_INVALID",
    107001: "ACL_ERROR_RT_INVALID_DEVICEID", 107002: "ACL_ERROR_RT_CONTEXT_NULL", 107003: "ACL_ERROR_RT_STREAM_CONTEXT",
    107017: "ACL_ERROR_RT_INVALID_HANDLE", 207000: "ACL_ERROR_RT_FEATURE_NOT_SUPPORT",
    207001: "ACL_ERROR_RT_MEMORY_ALLOCATION", 207004: "ACL_ERROR_RT_NO_DEVICE",
    500000: "ACL_ERROR_INTERNAL_ERROR", 500001: "ACL_ERROR_FAILURE", 500002: "ACL_ERROR_GE_FAILURE",
    500003: "ACL_ERROR_RT_FAILURE", 500004: "ACL_ERROR_DRV_FAILURE",
}

_vp, _i32, _u32, _sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_size_t
# name -> (restype, argtypes); every one is required (a CANN without aclrtLaunchKernelWithHostArgs is too old)
_REQUIRED = {
    # (data, size, options, &binHandle); the image passes as bytes (c_char_p: no copy, NULs allowed with the size)
    "aclrtBinaryLoadFromData": (_i32, [ctypes.c_char_p, _sz, _vp, ctypes.POINTER(_vp)]),
    "aclrtBinaryGetFunction": (_i32, [_vp, ctypes.c_char_p, ctypes.POINTER(_vp)]),
    # (funcHandle, numBlocks, stream, cfg, hostArgs, argsSize, placeHolderArray, placeHolderNum)
    "aclrtLaunchKernelWithHostArgs": (_i32, [_vp, _u32, _vp, _vp, ctypes.c_char_p, _sz, _vp, _sz]),
    "aclrtGetDevice": (_i32, [ctypes.POINTER(_i32)]),
    "aclrtSetDevice": (_i32, [_i32]),
}
# present on the CANN releases that have them; the loader works without them
_OPTIONAL = {
    "aclGetRecentErrMsg": (ctypes.c_char_p, []),
    "aclrtGetDeviceInfo": (_i32, [_u32, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]),
    "aclGetDeviceCapability": (_i32, [_u32, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]),
    "aclrtGetSocName": (ctypes.c_char_p, []),
}


class AclError(RuntimeError):
    """A CANN runtime (ACL) call failed."""


class AclUnavailableError(AclError):
    """The CANN runtime (libascendcl.so) is not installed here, or lacks an entry point the loader calls."""


class Acl:
    """The ACL entry points of one opened library."""

    def __init__(self, lib, path="libascendcl.so"):
        self.lib, self.path = lib, path
        for name, (restype, argtypes) in _REQUIRED.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise AclUnavailableError(
                    f"{path} has no {name}: KernelKiln's Ascend kernels need the CANN runtime >= 9.2 "
                    "(aclrtLaunchKernelWithHostArgs and aclrtBinaryLoadFromData)") from None
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name, fn)
        for name, (restype, argtypes) in _OPTIONAL.items():
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name, fn)

    def error_text(self, code):
        name = ERROR_NAMES.get(code, "ACL error")
        msg = self.aclGetRecentErrMsg() if self.aclGetRecentErrMsg is not None else None
        return f"{name} ({code})" + (f": {msg.decode(errors='replace').strip()}" if msg else "")

    def check(self, code, what):
        if code != ACL_SUCCESS:
            raise AclError(f"{what} failed: {self.error_text(code)}")

    def current_device(self):
        """The calling thread's current device, or None where none is set (ACL_ERROR_RT_CONTEXT_NULL)."""
        d = _i32()
        rc = self.aclrtGetDevice(ctypes.byref(d))
        if rc == 107002:
            return None
        self.check(rc, "aclrtGetDevice")
        return d.value

    def set_device(self, device):
        self.check(self.aclrtSetDevice(device), f"aclrtSetDevice({device})")

    def device_info(self, device, attr, capability=None):
        """An aclrtDevAttr of ``device`` (aclrtGetDeviceInfo); where this CANN lacks that call, the aclDeviceInfo
        ``capability`` (aclGetDeviceCapability), if given."""
        v = ctypes.c_int64()
        if self.aclrtGetDeviceInfo is not None:
            self.check(self.aclrtGetDeviceInfo(device, attr, ctypes.byref(v)), f"aclrtGetDeviceInfo({attr})")
            return v.value
        if capability is not None and self.aclGetDeviceCapability is not None:
            self.check(self.aclGetDeviceCapability(device, capability, ctypes.byref(v)),
                       f"aclGetDeviceCapability({capability})")
            return v.value
        raise AclUnavailableError(f"{self.path} has neither aclrtGetDeviceInfo nor aclGetDeviceCapability")

    def soc_name(self):
        """The SoC name of the current device (e.g. 'Ascend950PR_...'), or None where this CANN cannot say."""
        if self.aclrtGetSocName is None:
            return None
        name = self.aclrtGetSocName()
        return name.decode() if name else None


def candidates():
    """The paths tried for libascendcl.so, in order."""
    override = os.environ.get("KERNELKILN_ASCENDCL")
    if override:
        return [override]
    out = ["libascendcl.so"]
    roots = [os.environ.get(v) for v in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")]
    for root in [r for r in roots if r] + ["/usr/local/Ascend/ascend-toolkit/latest"]:
        out += [os.path.join(root, "lib64", "libascendcl.so"), os.path.join(root, "runtime", "lib64", "libascendcl.so")]
    return out


_acl = None
_acl_lock = threading.Lock()


def get_acl():
    """The process-wide Acl, opening libascendcl.so on first use (never at import)."""
    global _acl
    if _acl is None:
        with _acl_lock:
            if _acl is None:
                errors = []
                for path in candidates():
                    try:
                        lib = ctypes.CDLL(path)
                    except OSError as e:
                        errors.append(f"{path}: {e}")
                        continue
                    _acl = Acl(lib, path)
                    break
                else:
                    raise AclUnavailableError(
                        "the CANN runtime (libascendcl.so) was not found; KernelKiln's Ascend kernels need an Ascend "
                        "950 with CANN >= 9.2: install the CANN toolkit and source its set_env.sh (or set "
                        "ASCEND_HOME_PATH), then import torch_npu. Tried: " + "; ".join(errors))
    return _acl


def reset():
    """Forget the opened library (tests; a process that changed KERNELKILN_ASCENDCL)."""
    global _acl
    with _acl_lock:
        _acl = None
