"""KernelKiln's loader: kernel store, driver-API loader, launch. Depends on torch and libcuda only; the Ascend
loader (acl.py, ascend.py) on libascendcl, opened at the first NPU call.

It knows kernels, their launch specs and the driver; what the ops share (checks, outputs, error flags, launches by
name, the torch.library registry) is kernelkiln._ops.
"""
import torch

from kernelkiln import config
from kernelkiln._runtime.artifacts import MissingSpecializationError, UnsupportedDeviceError, store  # noqa: F401
from kernelkiln._runtime.driver import DriverError  # noqa: F401


def preload(ops=None, device=None):
    """Load the modules of every built variant (of ``ops``) on ``device`` now.

    Call it before CUDA-graph capture: module loading is not capturable.
    Returns the number of variants loaded.
    """
    config.require_cuda("preload")
    d = torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
    index = torch.cuda.current_device() if d.index is None else d.index
    s = store()
    arch = s.device_arch(index)
    n = 0
    for e in s.variants(arch=arch):
        if ops is None or e["op"] in ops:
            names = list(e["variant"])
            s.kernel(e["op"], names, [e["variant"][k] for k in names], index).load(index)
            n += 1
    return n
