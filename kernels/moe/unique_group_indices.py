"""inplace_unique_group_indices (v1): within each row of an int64 [T, K] tensor, every later repeat of an id
(>= 0) becomes -1, in place (docs/SPEC.md §3.1).

A warp holds 32 // K whole rows, lane = row_in_warp * K + k (K <= 32, runtime). Two __match_any_sync (on
the id and on the row) give the lanes that hold the same id in the same row; a lane with such a lane
below it is a repeat. Any id value is compared exactly (no bitmask over num_groups), as the reference.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401

# Declared in kernelkiln_contract.moe (INPLACE_UNIQUE_GROUP_INDICES): the CTA size, and the launch-argument names
# below, which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    th = p["threads"]
    ids_numel = T.dynamic("ids_numel")

    @T.prim_func
    def inplace_unique_group_indices(
        ids: T.Tensor((ids_numel,), "int64"),  # [T, K], inner stride 1; read and written in place
        num_rows: T.int32,  # T
        num_cols: T.int32,  # K <= 32
        row_stride: T.int32,
        rows_per_warp: T.int32,  # 32 // K
        num_ctas: T.int32,
    ):
        with T.Kernel(num_ctas, threads=th) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            sub = T.truncdiv(lane, num_cols)
            row = (bx * (th // 32) + tx // 32) * rows_per_warp + sub
            live = sub < rows_per_warp and row < num_rows
            addr = T.Cast("int64", row) * row_stride + (lane - sub * num_cols)
            v = T.alloc_var("int64")
            T.pdl_sync()
            v = T.int64(-1)
            if live:
                v = ids[addr]
            same_id = T.call_extern("uint32", "__match_any_sync", T.uint32(0xFFFFFFFF), v)
            same_row = T.call_extern("uint32", "__match_any_sync", T.uint32(0xFFFFFFFF),
                                     T.if_then_else(live, row, -1))
            below = T.shift_left(T.uint32(1), T.Cast("uint32", lane)) - T.uint32(1)
            if live and v >= T.int64(0) and T.bitwise_and(T.bitwise_and(same_id, same_row), below) != T.uint32(0):
                ids[addr] = T.int64(-1)
            T.pdl_trigger()

    return inplace_unique_group_indices
