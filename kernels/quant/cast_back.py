"""cast_back: dequantization of e4m3 / packed e2m1 data with block scales (docs/SPEC.md §3.2).

out = decode(q) * sf[block] in fp32, rounded once to the output dtype (bf16 RNE or fp32),
exactly like kernelkiln.torch.cast_back.

Compile-time (one cubin each): data format, output dtype, and whether the block is
per-channel (g == 1: one scale per element column) or g >= 16 (one scale per
16-element thread segment).
Runtime (kernel arguments): token count, hidden size, every stride, the block
(gm, g), and the scale storage: fp32, e4m3 or packed UE8M0. Packed UE8M0 is
addressed as bytes, byte = (rb >> pm)*stride_t + (kb >> pk)*stride_k + (rb & mm) + (kb & mk)
with (pm, pk) = (0, 2) for packing along K and (2, 0) for per-channel "col pack"
along M, so row-major, TMA-aligned column-major and both packings share one cubin.

Thread mapping: one thread = 16 elements (one 16-byte FP8 load, or 8 bytes of FP4)
of ROWS consecutive rows; warps are stacked along rows, a CTA covers WARPS*ROWS rows
x 512 channels. No shared memory.
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.quant (CAST_BACK): data format, output dtype and per-channel blocks, and the
# launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL

VEC = 16  # elements per thread and row
ROWS = 4  # rows per thread (per-channel blocks need gm % ROWS == 0)
WARPS = 4
SF_FP32, SF_E4M3, SF_UE8M0 = 0, 1, 2  # runtime scale storage selector


def build(p, arch):
    """TileLang PrimFunc for one variant. ``arch`` does not change this kernel."""
    import tilelang.language as T

    from kernels.common.numerics import e2m1_value

    del arch
    fmt, out_dtype, per_channel = p["fmt"], p["out_dtype"], bool(p["per_channel"])
    x_storage = "float8_e4m3fn" if fmt == "e4m3" else "uint32"
    seg = 32 * VEC
    n_sf = VEC if per_channel else 1  # scales per thread and row
    out_chunk = 8 if out_dtype == "bfloat16" else 4  # 16-byte stores
    x_numel, out_numel, sf_numel, sfq_numel, sfb_numel = T.dynamic("x_numel, out_numel, sf_numel, sfq_numel, "
                                                                   "sfb_numel")

    def scale(bufs, mode, st, sk, pm, pk, rb, kb):
        """fp32 scale of block (rb, kb) in the runtime-selected storage."""
        f32, e4m3, raw = bufs
        off = T.Cast("int64", rb) * st + kb * sk
        boff = (T.Cast("int64", T.shift_right(rb, pm)) * st + T.shift_right(kb, pk) * sk +
                T.bitwise_and(rb, T.shift_left(1, pm) - 1) + T.bitwise_and(kb, T.shift_left(1, pk) - 1))
        return T.if_then_else(
            mode == SF_FP32, f32[off],
            T.if_then_else(mode == SF_E4M3, T.Cast("float32", e4m3[off]),
                           T.reinterpret("float32", T.shift_left(T.Cast("uint32", raw[boff]), T.uint32(23)))))

    @T.prim_func
    def cast_back(
        x: T.Tensor((x_numel,), x_storage),
        out: T.Tensor((out_numel,), out_dtype),
        sf: T.Tensor((sf_numel,), "float32"),
        sf_e4m3: T.Tensor((sfq_numel,), "float8_e4m3fn"),
        sf_bytes: T.Tensor((sfb_numel,), "uint8"),  # packed UE8M0, addressed as bytes
        num_tokens: T.int32,
        hidden_div64: T.int32,
        x_stride_unit: T.int32,  # row stride of x: e4m3 in bytes / 16, e2m1 in uint32 words / 2
        out_stride_unit: T.int32,  # row stride of out in elements / 16
        block_m: T.int32,
        block_k: T.int32,  # g (1 for per-channel)
        sf_mode: T.int32,  # SF_FP32, SF_E4M3 or SF_UE8M0
        sf_stride_t: T.int32,  # in elements (bytes for ue8m0: 4 x the int32 stride)
        sf_stride_k: T.int32,
        pack_shift_m: T.int32,  # ue8m0: 2 when packed along M (per-channel), else 0
        pack_shift_k: T.int32,  # ue8m0: 2 when packed along K, else 0
    ):
        with T.Kernel(T.ceildiv(num_tokens, ROWS * WARPS), T.ceildiv(hidden_div64 * 64, seg),
                      threads=32 * WARPS) as (bx, by):
            tx = T.get_thread_binding()
            lane = tx % 32
            col = by * seg + lane * VEC
            col_ok = col < hidden_div64 * 64
            row0 = bx * (ROWS * WARPS) + (tx // 32) * ROWS
            xq = T.alloc_local((ROWS, VEC), "float8_e4m3fn")
            xw = T.alloc_local((ROWS, 2), "uint32")
            s = T.alloc_local((ROWS, n_sf), "float32")
            v = T.alloc_local((VEC,), "float32")

            T.pdl_sync()
            for r in T.unroll(ROWS):
                row = row0 + r
                if row < num_tokens and col_ok:
                    if fmt == "e4m3":
                        for i in T.vectorized(VEC):
                            xq[r, i] = x[T.Cast("int64", row) * x_stride_unit * VEC + col + i]
                    else:
                        for i in T.vectorized(2):
                            xw[r, i] = x[T.Cast("int64", row) * x_stride_unit * 2 + col // 8 + i]
            # Scales: per-channel blocks share one block row over the thread's ROWS rows
            # (gm % ROWS == 0), so each of the 16 column scales is read once.
            if per_channel:
                if row0 < num_tokens and col_ok:
                    for i in T.unroll(VEC):
                        s[0, i] = scale((sf, sf_e4m3, sf_bytes), sf_mode, sf_stride_t, sf_stride_k, pack_shift_m,
                                        pack_shift_k, row0 // block_m, col + i)
            else:
                for r in T.unroll(ROWS):
                    if row0 + r < num_tokens and col_ok:
                        s[r, 0] = scale((sf, sf_e4m3, sf_bytes), sf_mode, sf_stride_t, sf_stride_k, pack_shift_m,
                                        pack_shift_k, (row0 + r) // block_m, col // block_k)

            for r in T.unroll(ROWS):
                row = row0 + r
                if row < num_tokens and col_ok:
                    for i in T.unroll(VEC):
                        if fmt == "e4m3":
                            v[i] = T.Cast("float32", xq[r, i])
                        else:
                            v[i] = e2m1_value(xw[r, i // 8], i % 8)
                        v[i] = v[i] * (s[0, i] if per_channel else s[r, 0])
                    for c in T.unroll(VEC // out_chunk):
                        for i in T.vectorized(out_chunk):
                            out[T.Cast("int64", row) * out_stride_unit * VEC + col + c * out_chunk + i] = \
                                T.Cast(out_dtype, v[c * out_chunk + i])
            T.pdl_trigger()

    return cast_back
