"""selftest_tma_copy: a 2-D copy through shared memory whose store lowers to a TMA bulk copy,
launched as 2-CTA clusters. It exists to prove the loader's per-call TMA descriptor
encoding, buffer-shape symbol binding and cluster launch on real hardware (no op uses
TMA or clusters yet). Rows are dynamic; the 256 columns are static.
"""
# Declared in kernelkiln_contract.selftest (SELFTEST_TMA_COPY): the dtype, and the launch-argument names below, which
# the build checks against this PrimFunc.
PASS_CONFIGS = {"tl.disable_warp_specialized": True}
COLS, TILE = 256, 64


def build(p, arch):
    import tilelang.language as T

    del arch
    dtype = p["dtype"]
    rows = T.dynamic("rows")

    @T.prim_func
    def tma_copy(src: T.Tensor((rows, COLS), dtype), dst: T.Tensor((rows, COLS), dtype)):
        with T.Kernel(COLS // TILE, T.ceildiv(rows, TILE), threads=128, cluster_dims=(2, 1, 1)) as (bx, by):
            tile = T.alloc_shared((TILE, TILE), dtype)
            T.copy(src[by * TILE, bx * TILE], tile)
            T.copy(tile, dst[by * TILE, bx * TILE])

    return tma_copy
