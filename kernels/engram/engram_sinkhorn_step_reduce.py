"""engram_sinkhorn_step_reduce: col_sumsq[d] = sum over p of col_sumsq_partial[p, d], strictly in increasing p from
+0 (spec: the contract's doc, kernelkiln_contract.engram_sinkhorn).

A CTA takes 32 columns; its warps load a block of ROWS partial rows into shared memory (each lane one column, each
warp ROWS / warps rows, all loads of a block in flight at once), then warp 0 adds the block's rows in order to its
lanes' running sums. The sequential chain is one FADD per row and column. With a guard per row (the last block's
rows past P) each addition waited for its own shared-memory load; unguarded, the loads run ahead of the chain.

Compile-time: threads (the loading warps). Runtime: D and the partial count P.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401

# Declared in kernelkiln_contract.engram_sinkhorn (ENGRAM_SINKHORN_STEP_REDUCE): threads, and the launch-argument
# names below, which the build checks against this PrimFunc.
COLS = 32
ROWS = 128  # partial rows per shared-memory block


def build(p, arch):
    import tilelang.language as T

    del arch
    threads = p["threads"]
    warps = threads // 32
    per_warp = ROWS // warps
    f32 = "float32"
    n_p, n_o = T.dynamic("n_p, n_o")

    @T.prim_func
    def engram_sinkhorn_step_reduce(
        col_sumsq_partial: T.Tensor((n_p,), f32),  # [P, D]
        col_sumsq: T.Tensor((n_o,), f32),  # [D]
        head_dim: T.int32,
        num_partials: T.int32,  # P
    ):
        with T.Kernel(T.ceildiv(head_dim, COLS), threads=threads) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            warp = tx // 32
            block = T.alloc_shared((ROWS, COLS), f32)
            s = T.alloc_local((1,), f32)
            col = bx * COLS + lane

            T.pdl_sync()
            s[0] = T.float32(0)
            for b in T.serial(T.ceildiv(num_partials, ROWS)):
                T.sync_threads()  # the previous block has been added
                for j in T.unroll(per_warp):
                    row = b * ROWS + warp * per_warp + j
                    block[warp * per_warp + j, lane] = T.if_then_else(
                        T.And(row < num_partials, col < head_dim),
                        col_sumsq_partial[T.Cast("int64", row) * head_dim + col], T.float32(0))
                T.sync_threads()
                if warp == 0:  # the rows past P were stored as +0, and s + (+0) is s (s is never -0: it starts
                    # at +0 and a round-to-nearest sum is -0 only for two -0 terms), so every row is added unguarded
                    # and the shared-memory loads of the block can all be in flight before the chain of additions
                    for j in T.unroll(ROWS):
                        s[0] = T.call_extern(f32, "__fadd_rn", s[0], block[j, lane])
            if warp == 0 and col < head_dim:
                col_sumsq[col] = s[0]
            T.pdl_trigger()

    return engram_sinkhorn_step_reduce
