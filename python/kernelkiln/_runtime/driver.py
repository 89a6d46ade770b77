"""Thin ctypes binding of the CUDA driver API (libcuda.so.1), opened at first use.

No link-time CUDA dependency and no cudart: the wheel runs on any driver that
supports the cubins' toolkit (13.0 here). Only the calls the loader needs.
"""
import ctypes
import threading

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_CONTEXT = 201

CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6

_vp = ctypes.c_void_p
_SIGNATURES = {
    "cuInit": [ctypes.c_uint],
    "cuDriverGetVersion": [ctypes.POINTER(ctypes.c_int)],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
    "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_vp), ctypes.c_int],
    "cuCtxGetCurrent": [ctypes.POINTER(_vp)],
    "cuCtxPushCurrent_v2": [_vp],
    "cuCtxPopCurrent_v2": [ctypes.POINTER(_vp)],
    "cuModuleLoadData": [ctypes.POINTER(_vp), ctypes.c_char_p],
    "cuModuleGetFunction": [ctypes.POINTER(_vp), _vp, ctypes.c_char_p],
    "cuFuncSetAttribute": [_vp, ctypes.c_int, ctypes.c_int],
    "cuLaunchKernelEx": [_vp, _vp, _vp, _vp],
    "cuTensorMapEncodeTiled": [_vp, ctypes.c_int, ctypes.c_uint, _vp, _vp, _vp, _vp, _vp,
                               ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}


class DriverError(RuntimeError):
    """A CUDA driver call failed, or the driver is missing."""


class Driver:
    def __init__(self, lib):
        self.lib = lib
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
            setattr(self, name, fn)

    def error_text(self, code):
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.cuGetErrorName(code, ctypes.byref(name))
        self.cuGetErrorString(code, ctypes.byref(text))
        return f"{(name.value or b'?').decode()} ({code}): {(text.value or b'').decode()}"

    def check(self, code, what):
        if code != CUDA_SUCCESS:
            raise DriverError(f"{what} failed: {self.error_text(code)}")

    def attribute(self, attr, device):
        v = ctypes.c_int()
        self.check(self.cuDeviceGetAttribute(ctypes.byref(v), attr, device), "cuDeviceGetAttribute")
        return v.value

    def version(self):
        v = ctypes.c_int()
        self.check(self.cuDriverGetVersion(ctypes.byref(v)), "cuDriverGetVersion")
        return v.value

    def primary_context(self, device_ordinal):
        dev, ctx = ctypes.c_int(), _vp()
        self.check(self.cuDeviceGet(ctypes.byref(dev), device_ordinal), "cuDeviceGet")
        self.check(self.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        return ctx.value

    def current_context(self):
        ctx = _vp()
        self.check(self.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        return ctx.value


_driver = None
_driver_lock = threading.Lock()


def get_driver():
    """The process-wide Driver, initialising libcuda on first use."""
    global _driver
    if _driver is None:
        with _driver_lock:
            if _driver is None:
                try:
                    lib = ctypes.CDLL("libcuda.so.1")
                except OSError as e:
                    raise DriverError("the NVIDIA driver (libcuda.so.1) was not found; KernelKiln kernels need an "
                                      f"NVIDIA GPU with driver >= 580 (CUDA 13.0): {e}") from None
                drv = Driver(lib)
                drv.check(drv.cuInit(0), "cuInit")
                _driver = drv
    return _driver
