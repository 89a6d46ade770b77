"""TileKiln: DeepSeek-style LLM kernels compiled ahead of time (tile_kernels 2.1 compatible API).

Importing needs neither a GPU nor a CUDA driver; kernels load on first use.
"""
from tilekiln import config, moe, quant  # noqa: F401
from tilekiln import transpose  # noqa: F401
from tilekiln._runtime import DriverError, MissingSpecializationError, UnsupportedDeviceError, preload  # noqa: F401
from tilekiln.config import (  # noqa: F401
    get_amax_clamp_for_quant,
    get_deterministic_algorithms,
    get_device_num_sms,
    get_num_sms,
    get_pdl,
    get_token_alignment,
    set_amax_clamp_for_quant,
    set_num_sms,
    set_pdl,
    set_token_alignment,
    use_deterministic_algorithms,
)
from tilekiln.quant import check_errors  # noqa: F401  (quant's covers the routing kernels too)

__version__ = "0.1.0"


def list_kernels():
    """[(op, arch, variant params)] of every precompiled kernel in this installation."""
    from tilekiln._runtime import store
    return [(e["op"], e["arch"], e["variant"]) for e in store().variants()]
