"""KernelKiln: DeepSeek-style LLM kernels compiled ahead of time (tile_kernels 2.1 compatible API).

Importing needs neither a GPU nor a CUDA driver; kernels load on first use. The op families
(``quant``, ``moe``, ``transpose``) and the references (``torch``) are imported on first attribute
access: a first call pays only for its own family. Their torch.library ops are registered later still:
the first lookup of ``torch.ops.kernelkiln.<op>`` imports the op's family and registers its ops
(kernelkiln/_ops/torch_ops.py).
"""
import importlib as _importlib
import pkgutil as _pkgutil

from kernelkiln import config  # noqa: F401
from kernelkiln._runtime import DriverError, MissingSpecializationError, UnsupportedDeviceError, preload  # noqa: F401
from kernelkiln._ops import torch_ops as _torch_ops
from kernelkiln.config import (  # noqa: F401
    get_amax_clamp_for_quant,
    get_deterministic_algorithms,
    get_device,
    get_device_num_sms,
    get_max_smem_per_sm,
    get_max_ub_per_vector_core,
    get_num_ai_cores,
    get_num_cube_cores,
    get_num_sms,
    get_num_vec_cores,
    get_pdl,
    get_token_alignment,
    is_ascend,
    set_amax_clamp_for_quant,
    set_num_sms,
    set_pdl,
    set_token_alignment,
    use_deterministic_algorithms,
)

__version__ = "0.1.0"
# The tile_kernels API level this release implements (its ops and helpers by the names of tile_kernels 2.1, with the
# v1-only ops under their v1 names); code written against tile_kernels can check it instead of __version__.
TILE_KERNELS_API = "2.1"
_torch_ops.install()
# the op families and the references, imported on first access: every public subpackage
_LAZY_SUBMODULES = tuple(sorted(m.name for m in _pkgutil.iter_modules(__path__) if m.ispkg and not m.name.startswith("_")))


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        return _importlib.import_module(f"kernelkiln.{name}")
    raise AttributeError(f"module 'kernelkiln' has no attribute {name!r}")


def __dir__():
    return sorted({n for n in globals() if not n.startswith("_") or n == "__version__"} | set(_LAZY_SUBMODULES))


def check_errors(device=None):
    """Synchronize ``device`` and raise any error a KernelKiln kernel recorded there (quant and routing)."""
    from kernelkiln.quant import check_errors as check
    return check(device)


def list_kernels():
    """[(op, arch, variant params)] of every precompiled kernel in this installation."""
    from kernelkiln._runtime import store
    return [(e["op"], e["arch"], e["variant"]) for e in store().variants()]
