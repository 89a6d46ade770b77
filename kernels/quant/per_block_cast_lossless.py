"""per_block_cast_lossless: exact MXFP4 (e2m1 + power-of-two scales) -> e4m3 with coarser blocks.

Numerics (docs/SPEC.md §3.2, mirrored by kernelkiln.torch.quant_lossless): every scale is a
biased exponent byte e (fp32 bits >> 23, or the UE8M0 byte). An output block's exponent is
E = max(0, max(e over its input blocks) - 6) and every value is multiplied by 2^(e - E).
With e - E in [-5, 6] the product of an e2m1 value (0, 0.5 .. 6) is an e4m3 normal (or zero)
and exact: 6 * 2^6 = 384 <= 448, 0.5 * 2^-5 = 2^-6 = the smallest e4m3 normal.

No float arithmetic at all: for a chunk with k = 6 + e - E, the e4m3 byte of magnitude code
c (3 bits) is 0 (c = 0), k << 3 (c = 1) or (c << 2) + (k << 3) (c >= 2). The 8 table bytes
sit in two words and one ``__byte_perm`` per 4 values looks them up with the codes as the
selector; the sign bits are spread from nibbles to bytes with one more ``__byte_perm``.

Errors do not trap (a device assert would kill the CUDA context): a chunk whose exponent is
more than 11 below its output block's maximum (e + 5 < E), or an fp32 scale that is not a
non-negative power of two, records (code, row, scale column) in ``err`` (host-mapped memory;
the Python side raises). The data of such blocks is unspecified.

Thread mapping: a CTA of 128 threads covers 128 rows x 128 channels (64 input bytes per row).
Thread tx owns the 32-channel chunk c4 = tx % 4 of rows s * 32 + tx // 4 (s < 4): four 16-byte
loads in flight, two 16-byte stores per row. The output exponent is reduced with xor shuffles
over the chunks and rows of a warp (8 rows), then across warps and slots through a 2 KB shared
exchange (one barrier).

Compile-time: nothing that changes the code but the output format (e4m3 only). Runtime:
sizes, strides, the input and output scale storage (fp32 / packed UE8M0, row- or column-major)
and both block shapes (powers of two, as log2).
"""
# Declared in kernelkiln_contract.quant (PER_BLOCK_CAST_LOSSLESS): the output format (e4m3 only), and the
# launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
    # The exponent exchange is written and read around one explicit barrier.
    "tl.disable_data_race_check": True,
}

THREADS = 128
TILE_ROWS = 128
ROW_STEP = THREADS // 4  # 4 chunks of 32 channels per row
SLOTS = TILE_ROWS // ROW_STEP  # rows per thread: s * ROW_STEP + tx // 4
WARPS = THREADS // 32
SF_FP32, SF_UE8M0 = 0, 1
ERR_SPREAD, ERR_NOT_POW2 = 1, 2  # err[0] codes (kernelkiln/quant/_lossless.py)


def _u32(T, v):
    return T.uint32(v)


def _convert(T, w, tlo, thi):
    """Two e4m3 words (elements 0..3, 4..7) of one word of eight e2m1 nibbles."""
    outs = []
    for half in range(2):
        codes = T.bitwise_and(T.shift_right(w, _u32(T, 16 * half)), _u32(T, 0x7777))
        mag = T.call_extern("uint32", "__byte_perm", tlo, thi, codes)
        # bytes [n1n0, 0, n3n2, 0] of this half: sign of nibble 2i at bit 16i+3, of 2i+1 at 16i+7
        sp = T.call_extern("uint32", "__byte_perm", w, _u32(T, 0), _u32(T, 0x4140 if half == 0 else 0x4342))
        sign = T.bitwise_or(T.bitwise_and(T.shift_left(sp, _u32(T, 4)), _u32(T, 0x00800080)),
                            T.bitwise_and(T.shift_left(sp, _u32(T, 8)), _u32(T, 0x80008000)))
        outs.append(T.bitwise_or(mag, sign))
    return outs


def build(p, arch):
    """TileLang PrimFunc. ``arch`` does not change this kernel."""
    import tilelang.language as T

    del arch, p
    x_numel, out_numel, isf_numel, isfb_numel, osf_numel, osfb_numel = T.dynamic(
        "x_numel, out_numel, isf_numel, isfb_numel, osf_numel, osfb_numel")

    @T.prim_func
    def per_block_cast_lossless(
        x: T.Tensor((x_numel,), "uint32"),  # packed e2m1 rows as words (8 values each)
        out: T.Tensor((out_numel,), "uint32"),  # e4m3 rows as words (4 values each)
        in_sf: T.Tensor((isf_numel,), "uint32"),  # fp32 scales, read as bits
        in_sfb: T.Tensor((isfb_numel,), "uint8"),  # packed UE8M0 scales as bytes
        out_sf: T.Tensor((osf_numel,), "uint32"),  # fp32 scales, written as bits
        out_sfb: T.Tensor((osfb_numel,), "uint8"),
        err: T.Tensor((4,), "int32"),  # host-mapped: [code, row, scale column, 0]
        num_tokens: T.int32,
        hidden_div128: T.int32,
        x_stride_q: T.int32,  # row stride of x in 16-byte units (whole vectors: provably aligned)
        out_stride_q: T.int32,  # row stride of out in 16-byte units
        in_mode: T.int32,  # SF_FP32 / SF_UE8M0
        in_sf_t: T.int32,  # per scale row: fp32 elements, or bytes (UE8M0)
        in_sf_k: T.int32,  # per scale column (fp32) or per int32 word of 4 scales (UE8M0, bytes)
        lg_bm_in: T.int32,  # log2 of the input block's rows
        lg_kq_in: T.int32,  # log2 of the input block's channels / 32
        out_mode: T.int32,
        out_sf_t: T.int32,
        out_sf_k: T.int32,
        lg_bm_out: T.int32,
        lg_kq_out: T.int32,
    ):
        with T.Kernel(hidden_div128, T.ceildiv(num_tokens, TILE_ROWS), threads=THREADS) as (bx, by):
            tx = T.get_thread_binding()
            lane = tx % 32
            c4 = tx % 4
            kc = bx * 4 + c4  # 32-channel chunk index in the row
            xw = T.alloc_local((SLOTS, 4), "uint32")
            ow = T.alloc_local((8,), "uint32")
            ex = T.alloc_local((SLOTS,), "int32")  # the chunk's input exponent
            mx = T.alloc_local((SLOTS,), "int32")  # its output block's maximum
            bits = T.alloc_local((1,), "uint32")
            exchange = T.alloc_shared((SLOTS * THREADS,), "int32")

            T.pdl_sync()
            for s in T.unroll(SLOTS):
                row = by * TILE_ROWS + s * ROW_STEP + tx // 4
                ex[s] = 0
                if row < num_tokens:
                    for i in T.vectorized(4):
                        xw[s, i] = x[(T.Cast("int64", row) * x_stride_q + kc) * 4 + i]
                    rb = T.Cast("int64", T.shift_right(row, lg_bm_in))
                    kb = T.shift_right(kc, lg_kq_in)
                    if in_mode == SF_UE8M0:
                        ex[s] = T.Cast("int32", in_sfb[rb * in_sf_t + T.shift_right(kb, 2) * in_sf_k + kb % 4])
                    else:
                        bits[0] = in_sf[rb * in_sf_t + kb * in_sf_k]
                        ex[s] = T.Cast("int32", T.shift_right(bits[0], _u32(T, 23)))
                        if T.bitwise_and(bits[0], _u32(T, 0x807FFFFF)) != _u32(T, 0):
                            err[1] = row
                            err[2] = kb
                            err[0] = ERR_NOT_POW2
                for i in T.unroll(4):
                    if row >= num_tokens:
                        xw[s, i] = _u32(T, 0)

            # Output-block maximum: chunks of a row (lanes differing in bits 0-1), rows of the
            # warp (bits 2-4), then the warps and slots of a block row through shared memory.
            for s in T.unroll(SLOTS):
                mx[s] = ex[s]
                for b in range(2):  # uniform branches: every lane shuffles or none
                    if b < lg_kq_out:
                        mx[s] = T.max(mx[s], T.shfl_xor(mx[s], 1 << b))
                for b in range(3):
                    if b < lg_bm_out:
                        mx[s] = T.max(mx[s], T.shfl_xor(mx[s], 4 << b))
                exchange[s * THREADS + tx] = mx[s]
            T.sync_threads()
            if lg_bm_out > 3:
                for s in T.unroll(SLOTS):
                    rl = s * ROW_STEP + tx // 4  # row within the tile
                    for j in T.unroll(SLOTS):
                        for w in T.unroll(WARPS):
                            if T.shift_right(j * ROW_STEP + w * 8, lg_bm_out) == T.shift_right(rl, lg_bm_out):
                                mx[s] = T.max(mx[s], exchange[j * THREADS + w * 32 + lane])

            for s in T.unroll(SLOTS):
                row = by * TILE_ROWS + s * ROW_STEP + tx // 4
                if row < num_tokens:
                    e_out = T.max(mx[s] - 6, 0)
                    k = ex[s] - e_out + 6  # e4m3 exponent field of the value 1.0 * 2^(e - E), minus 1
                    if k < 1:
                        err[1] = row
                        err[2] = T.shift_right(kc, lg_kq_in)
                        err[0] = ERR_SPREAD
                    kk = T.Cast("uint32", T.max(k, 0) * 8)
                    tlo = _u32(T, 0x0C080000) + kk * _u32(T, 0x01010100)
                    thi = _u32(T, 0x1C181410) + kk * _u32(T, 0x01010101)
                    for i in T.unroll(4):
                        o0, o1 = _convert(T, xw[s, i], tlo, thi)
                        ow[2 * i] = o0
                        ow[2 * i + 1] = o1
                    for h in T.unroll(2):
                        for i in T.vectorized(4):
                            out[(T.Cast("int64", row) * out_stride_q + kc * 2 + h) * 4 + i] = ow[h * 4 + i]
                    # One writer per output block: its first row and first chunk.
                    if (T.bitwise_and(row, T.shift_left(1, lg_bm_out) - 1) == 0 and
                            T.bitwise_and(kc, T.shift_left(1, lg_kq_out) - 1) == 0):
                        ob = T.Cast("int64", T.shift_right(row, lg_bm_out))
                        okb = T.shift_right(kc, lg_kq_out)
                        if out_mode == SF_UE8M0:
                            out_sfb[ob * out_sf_t + T.shift_right(okb, 2) * out_sf_k + okb % 4] = \
                                T.Cast("uint8", e_out)
                        else:
                            out_sf[ob * out_sf_t + okb * out_sf_k] = T.shift_left(T.Cast("uint32", e_out),
                                                                                   _u32(T, 23))
            T.pdl_trigger()

    return per_block_cast_lossless
