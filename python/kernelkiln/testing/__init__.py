"""Test helpers of the peer's ``tile_kernels.testing`` that its users' tests import: ``numeric`` (bitwise equality,
the difference measure, rounding-bias check, byte counts) and ``quant`` (clearing the unused packed-scale bytes
before a bitwise comparison, adjacency ranks of quantized codes)."""
from kernelkiln.testing import numeric, quant  # noqa: F401
from kernelkiln.testing.quant import clear_unused_sf, clear_unused_sf_col_pack  # noqa: F401
