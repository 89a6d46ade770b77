"""Contracts of the self-test ops."""
from kernelkiln_contract._core import OpContract, Param

SELFTEST_TMA_COPY = OpContract(
    op="selftest_tma_copy",
    kernel="kernels.selftest.tma_copy",
    params=(Param("dtype", ("float32", "bfloat16")),),
    # the buffers only: their row count is a shape symbol, read from the tensors when the arguments are bound
    args=("src", "dst"),
    doc="A [rows, 256] copy through shared memory whose store is a TMA bulk copy, launched as 2-CTA clusters: it "
        "proves the loader's per-call TMA descriptors, shape-symbol binding and cluster launch.",
)

CONTRACTS = (SELFTEST_TMA_COPY,)
