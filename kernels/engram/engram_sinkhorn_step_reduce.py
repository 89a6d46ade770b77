"""engram_sinkhorn_step_reduce: col_sumsq[d] = sum over p of col_sumsq_partial[p, d], strictly in increasing p from
+0 (spec: the contract's doc, kernelkiln_contract.engram_sinkhorn).

A CTA takes 32 columns; its warps copy a block of SUBS · SUB partial rows into shared memory with cp.async (each
lane one column, each warp SUB / warps rows of every sub-block; a row past P is zero-filled by the copy's predicate),
one commit group per sub-block, so the loads of the whole block (P = 3 · SMs fits one block) are in flight at once.
Warp 0 then adds sub-block after sub-block in row order to its lanes' running sums as each lands (wait for it,
barrier), while the later ones still fly. The sequential chain is one FADD per row and column. Unguarded (the
zero-filled rows add +0), the shared-memory loads run ahead of the chain. The earlier kernel loaded 128-row blocks
with plain loads, one block after the other (a round trip per block).

Compile-time: threads (the loading warps). Runtime: D and the partial count P.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401

# Declared in kernelkiln_contract.engram_sinkhorn (ENGRAM_SINKHORN_STEP_REDUCE): threads, and the launch-argument
# names below, which the build checks against this PrimFunc.
COLS = 32
SUB = 128  # partial rows per sub-block (one commit group; warp 0's unrolled chain)
SUBS = 4  # sub-blocks per shared-memory block: 512 rows, 64 KB (the waits below are written out for 4)


def build(p, arch):
    import tilelang.language as T

    del arch
    threads = p["threads"]
    assert SUBS == 4, "the cp.async waits of the sub-blocks are written out for 4"
    warps = threads // 32
    per_warp = SUB // warps
    rows = SUB * SUBS
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
            block = T.alloc_shared((rows, COLS), f32)
            s = T.alloc_local((1,), f32)
            col = bx * COLS + lane

            T.pdl_sync()
            s[0] = T.float32(0)
            for b in T.serial(T.ceildiv(num_partials, rows)):
                T.sync_threads()  # the previous block has been added
                for sb in T.unroll(SUBS):
                    for j in T.unroll(per_warp):
                        r = sb * SUB + warp * per_warp + j
                        row = T.min(b * rows + r, num_partials - 1)  # in bounds; past P the predicate zero-fills
                        T.ptx_cp_async(T.access_ptr(block[r, lane], "w", 1),
                                       T.access_ptr(col_sumsq_partial[T.Cast("int64", row) * head_dim + col], "r", 1),
                                       1, T.And(b * rows + r < num_partials, col < head_dim))
                    T.ptx_commit_group()
                for sb in T.unroll(SUBS):
                    # the count must be a constant in the generated code, and T.unroll's index is not one
                    if sb == 0:
                        T.ptx_wait_group(3)
                    elif sb == 1:
                        T.ptx_wait_group(2)
                    elif sb == 2:
                        T.ptx_wait_group(1)
                    else:
                        T.ptx_wait_group(0)
                    T.sync_threads()  # sub-block sb has landed for every warp
                    if warp == 0:  # the rows past P are +0, and s + (+0) is s (s is never -0: it starts at +0 and
                        # a round-to-nearest sum is -0 only for two -0 terms), so every row is added unguarded and
                        # the shared-memory loads can run ahead of the chain of additions
                        for j in T.unroll(SUB):
                            s[0] = T.call_extern(f32, "__fadd_rn", s[0], block[sb * SUB + j, lane])
            if warp == 0 and col < head_dim:
                col_sumsq[col] = s[0]
            T.pdl_trigger()

    return engram_sinkhorn_step_reduce
