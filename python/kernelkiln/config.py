"""Process-global runtime configuration (docs/SPEC.md §1), tile_kernels-compatible names.

In KernelKiln none of these knobs selects a different cubin except through the
manifest: PDL is a launch attribute (every kernel is built with the PDL
wait/trigger, which are no-ops when launched without it), the amax floor is a
kernel argument, and the SM count is read from the device at run time.
"""
import functools
import os

from kernelkiln._formats import DEFAULT_CLAMP_MIN as _DEFAULT_CLAMP_MIN_VALUES  # noqa: E402

_state = {}


def reset_runtime_config():
    _state.clear()
    _state.update(num_sms=0, pdl=False, deterministic=False, token_alignment=128,
                  clamp=dict(_DEFAULT_CLAMP_MIN_VALUES))


reset_runtime_config()


def _check_int(name, value, lo=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")


_device_sms = {}  # CUDA device index (or ("npu", index)) -> SM count: fixed for a process, launches ask per call


@functools.lru_cache(maxsize=1)
def is_ascend() -> bool:
    """Whether this machine runs the Ascend (CANN) backend: an Ascend NPU's device manager is present. Answered once
    per process, as the peer's is (``is_ascend.cache_clear()`` asks again)."""
    return os.path.exists("/dev/davinci_manager")


@functools.lru_cache(maxsize=1)
def get_device() -> str:
    """The accelerator's torch device type: 'npu' on Ascend machines, else 'cuda' (also where there is no GPU: the
    tensors of the test helpers then fail on torch's own 'no CUDA' error, as the peer's do)."""
    return "npu" if is_ascend() else "cuda"


def require_cuda(what):
    """Raise the project's own error where torch has no CUDA device (a CPU-only build or no GPU), before torch's
    ``AssertionError: Torch not compiled with CUDA enabled`` or a driver error would."""
    import torch
    if not torch.cuda.is_available():
        from kernelkiln._runtime.artifacts import UnsupportedDeviceError
        why = "this torch build has no CUDA support" if torch.version.cuda is None else "torch sees no CUDA GPU"
        raise UnsupportedDeviceError(f"{what} needs an NVIDIA GPU, but {why} (torch {torch.__version__}). "
                                     "KernelKiln's kernels run on H100/H200 (sm_90a) and B200 (sm_100a).")


def require_npu(what):
    """``torch.npu`` (torch_npu's module), importing torch_npu if needed; the project's own error where it is missing
    or cannot load (it needs the CANN runtime)."""
    import torch
    npu = getattr(torch, "npu", None)
    if npu is None:
        try:
            import torch_npu  # noqa: F401  (registers torch.npu)
        except Exception as e:  # noqa: BLE001 - ImportError, or an OSError/RuntimeError of a missing CANN runtime
            from kernelkiln._runtime.artifacts import UnsupportedDeviceError
            raise UnsupportedDeviceError(
                f"{what} needs torch_npu (PyTorch's Ascend adapter, with the CANN runtime >= 9.2), which cannot be "
                f"imported here: {type(e).__name__}: {e}. Install torch-npu for torch {torch.__version__} and source "
                "CANN's set_env.sh.") from None
        npu = torch.npu
    return npu


def npu_current_device():
    """The current NPU index: torch_npu's where it is loaded, else the CANN runtime's (0 where none is set)."""
    import torch
    npu = getattr(torch, "npu", None)
    if npu is not None:
        return npu.current_device()
    from kernelkiln._runtime import acl
    d = acl.get_acl().current_device()
    return 0 if d is None else d


def npu_device_cube_cores(idx):
    """The cube-core count (= AI cores) of NPU ``idx``, from the CANN runtime's device info (aclrtGetDeviceInfo,
    aclGetDeviceCapability on older CANN), else torch_npu's device properties; read once per device."""
    key = ("npu", idx)
    n = _device_sms.get(key)
    if n is None:
        from kernelkiln._runtime import acl
        try:
            n = acl.get_acl().device_info(idx, acl.ACL_DEV_ATTR_CUBE_CORE_NUM, acl.ACL_DEVICE_INFO_AI_CORE_NUM)
        except acl.AclUnavailableError:
            import torch
            if getattr(torch, "npu", None) is None:
                raise
            n = torch.npu.get_device_properties(idx).cube_core_num
        n = _device_sms[key] = int(n)
    return n


def ascend_cores(core_type, idx):
    """The block dim a persistent Ascend kernel may use on NPU ``idx``: its vector cores (two per AI core), cube cores
    or AI cores, from ``set_num_sms`` where set (as the peer's queries), else the device's."""
    base = _state["num_sms"] or npu_device_cube_cores(idx)
    return 2 * base if core_type == "vector" else base


def get_device_num_sms(device=None):
    """The SM count of ``device`` (default: the current one); on Ascend, as the peer's, the NPU's cube-core count.
    Read once per device (``get_device_num_sms.cache_clear()`` forgets them)."""
    import torch
    if is_ascend():
        idx = None if device is None else (device if isinstance(device, int) else torch.device(device).index)
        return npu_device_cube_cores(npu_current_device() if idx is None else idx)
    idx = None if device is None else torch.device(device).index
    require_cuda("get_device_num_sms")
    if idx is None:  # no device, or "cuda" without an index: the current device
        idx = torch.cuda.current_device()
    n = _device_sms.get(idx)
    if n is None:
        n = _device_sms[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return n


get_device_num_sms.cache_clear = _device_sms.clear


# The Ascend core-count queries of the peer's API. On an NPU (is_ascend) they count its cores (get_device_num_sms
# reads the cube cores from the CANN runtime): AI cores = cube cores = the SM count, two vector cores per AI core.
# On CUDA an SM is each of them: kernels that use the AI cores, the cube cores or the vector cores all see the SM count.
def get_num_ai_cores() -> int:
    return get_num_sms()


def get_num_cube_cores() -> int:
    return get_num_sms()


def get_num_vec_cores() -> int:
    return 2 * get_num_sms()


def get_max_smem_per_sm() -> int:
    """Shared memory per SM of the current CUDA device, in bytes."""
    import torch
    require_cuda("get_max_smem_per_sm")
    idx = torch.cuda.current_device()
    n = _device_smem.get(idx)
    if n is None:
        n = _device_smem[idx] = torch.cuda.get_device_properties(idx).shared_memory_per_multiprocessor
    return n


def get_max_ub_per_vector_core(use_simt: bool = True) -> int:
    """Unified Buffer bytes per Ascend vector core (216 KiB with SIMT regions, 248 KiB without); Ascend only."""
    if not is_ascend():
        raise RuntimeError("get_max_ub_per_vector_core describes an Ascend NPU's vector cores; this machine has no "
                           "Ascend device (/dev/davinci_manager)")
    return (216 if use_simt else 248) * 1024


# Nothing to forget (not cached: the answer follows is_ascend); kept for the peer's lru_cache API.
get_max_ub_per_vector_core.cache_clear = lambda: None


_device_smem = {}
get_max_smem_per_sm.cache_clear = _device_smem.clear


def set_num_sms(num_sms: int) -> None:
    _check_int("num_sms", num_sms, 1)
    limit = get_device_num_sms()
    if num_sms > limit:
        raise ValueError(f"num_sms must be in 1..{limit} (this device's SM count), got {num_sms}")
    _state["num_sms"] = num_sms


def get_num_sms() -> int:
    return _state["num_sms"] or get_device_num_sms()


def set_pdl(use_pdl: bool) -> None:
    if not isinstance(use_pdl, bool):
        raise TypeError(f"use_pdl must be a bool, got {type(use_pdl).__name__}")
    _state["pdl"] = use_pdl


def get_pdl() -> bool:
    return _state["pdl"]


def use_deterministic_algorithms(enabled: bool) -> None:
    # Stored for API compatibility; every KernelKiln kernel is deterministic already.
    _state["deterministic"] = bool(enabled)


def get_deterministic_algorithms() -> bool:
    return _state["deterministic"]


def set_token_alignment(token_alignment: int) -> None:
    _check_int("token_alignment", token_alignment, 1)
    _state["token_alignment"] = token_alignment


def get_token_alignment() -> int:
    return _state["token_alignment"]


def set_amax_clamp_for_quant(fmt: str, use_e4m3_sf: bool, clamp_min_value: float) -> None:
    if fmt not in ("e4m3", "e2m1"):
        raise ValueError(f"fmt must be 'e4m3' or 'e2m1', got {fmt!r}")
    if not clamp_min_value > 0:
        raise ValueError(f"clamp_min_value must be > 0 (a positive normal floor), got {clamp_min_value}")
    _state["clamp"][(fmt, bool(use_e4m3_sf))] = float(clamp_min_value)


def get_amax_clamp_for_quant(fmt: str, use_e4m3_sf: bool) -> float:
    if fmt not in ("e4m3", "e2m1"):
        raise ValueError(f"fmt must be 'e4m3' or 'e2m1', got {fmt!r}")
    return _state["clamp"][(fmt, bool(use_e4m3_sf))]
