"""expand_to_fused / expand_to_fused_with_sf (v1): token rows -> expert-major slots (docs/SPEC.md §3.1).

One kernel for both ops and every dtype: rows are copied as raw units of ``vec_bytes``
(16 when the row, its stride and the pointers allow it; then 4; then 1), so the data
dtype never changes the code. CTA ``b < T`` loads row b into registers once (a segment
of 128 * MAXC units at a time) and stores it to each of its K slots, then copies the
token's scale row (4-byte elements, any strides: row- or column-major, fp32 or packed
UE8M0 int32) to the same slots. CTAs ``b >= T`` zero the padding rows (pos_to_expert < 0)
of PAD_ROWS slots each, data and scales, so the output is fully defined.

Compile-time: vec_bytes. Runtime: sizes, strides, K, whether scales are copied.
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.moe (EXPAND_TO_FUSED): the copy unit (16, 4 or 1 bytes) and the rule that picks it,
# and the launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL
THREADS = 128
MAXC = 8  # units per thread and segment: 16 KB of a 16-byte-unit row per CTA in flight
PAD_ROWS = 16  # padding slots per zeroing CTA


def build(p, arch):
    import tilelang.language as T

    del arch
    vb = p["vec_bytes"]
    storage = "uint8" if vb == 1 else "uint32"
    lanes = max(vb // 4, 1)
    seg = THREADS * MAXC
    x_numel, out_numel, map_numel, n_numel, xsf_numel, osf_numel = T.dynamic(
        "x_numel, out_numel, map_numel, n_numel, xsf_numel, osf_numel")

    @T.prim_func
    def expand_to_fused(
        x: T.Tensor((x_numel,), storage),
        out: T.Tensor((out_numel,), storage),  # [N, row_units] contiguous
        token_topk_to_pos: T.Tensor((map_numel,), "int32"),  # [T, K] contiguous
        pos_to_expert: T.Tensor((n_numel,), "int32"),
        x_sf: T.Tensor((xsf_numel,), "int32"),  # 4-byte scale elements (fp32 or packed UE8M0)
        out_sf: T.Tensor((osf_numel,), "int32"),
        num_tokens: T.int32,
        num_topk: T.int32,
        num_expanded: T.int32,
        row_units: T.int32,  # row bytes / vec_bytes
        x_stride_units: T.int32,  # row stride of x in units
        sf_cols: T.int32,  # scale elements per row; 0 = no scales
        x_sf_stride_t: T.int32,
        x_sf_stride_k: T.int32,
        out_sf_stride_n: T.int32,
        out_sf_stride_k: T.int32,
        pad_ctas: T.int32,  # ceil(N / PAD_ROWS)
    ):
        with T.Kernel(num_tokens + pad_ctas, threads=THREADS) as bx:
            tx = T.get_thread_binding()
            regs = T.alloc_local((MAXC, lanes), storage)
            T.pdl_sync()
            if bx < num_tokens:
                row = T.Cast("int64", bx)
                for s in T.serial(T.ceildiv(row_units, seg)):
                    for j in T.unroll(MAXC):
                        u = s * seg + j * THREADS + tx
                        if u < row_units:
                            for v in T.vectorized(lanes):
                                regs[j, v] = x[(row * x_stride_units + u) * lanes + v]
                    for k in T.serial(num_topk):
                        pos = token_topk_to_pos[row * num_topk + k]
                        if pos >= 0 and pos < num_expanded:
                            for j in T.unroll(MAXC):
                                u = s * seg + j * THREADS + tx
                                if u < row_units:
                                    for v in T.vectorized(lanes):
                                        out[(T.Cast("int64", pos) * row_units + u) * lanes + v] = regs[j, v]
                for k in T.serial(num_topk):
                    pos = token_topk_to_pos[row * num_topk + k]
                    if pos >= 0 and pos < num_expanded:
                        for c in T.serial(tx, sf_cols, THREADS):
                            out_sf[T.Cast("int64", pos) * out_sf_stride_n + c * out_sf_stride_k] = \
                                x_sf[row * x_sf_stride_t + c * x_sf_stride_k]
            else:
                for r in T.serial(PAD_ROWS):
                    pos = (bx - num_tokens) * PAD_ROWS + r
                    if pos < num_expanded:
                        if pos_to_expert[pos] < 0:
                            for u in T.serial(tx, row_units, THREADS):
                                for v in T.vectorized(lanes):
                                    out[(T.Cast("int64", pos) * row_units + u) * lanes + v] = T.Cast(storage, 0)
                            for c in T.serial(tx, sf_cols, THREADS):
                                out_sf[T.Cast("int64", pos) * out_sf_stride_n + c * out_sf_stride_k] = 0
            T.pdl_trigger()

    return expand_to_fused
