"""Test helpers of the peer's ``tile_kernels.testing`` that its users' tests import: ``bench`` (output suppression,
test ids), ``numeric`` (bitwise equality, the difference measure, rounding-bias check, byte counts), ``generator``
(test levels, parameter sets and seeded test inputs), ``quant`` (clearing the unused packed-scale bytes before a
bitwise comparison, adjacency ranks of quantized codes). ``moe`` (stable router logits) is imported by name, as the
peer's is."""
from kernelkiln.testing import bench, generator, numeric, quant  # noqa: F401
from kernelkiln.testing.quant import clear_unused_sf, clear_unused_sf_col_pack  # noqa: F401
