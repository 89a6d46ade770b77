"""per_token_cast: row-wise block quantization bf16/fp32 -> e4m3 / e2m1 (docs/SPEC.md §3.2).

Also re-quantizes pre-quantized input: e4m3 data or packed e2m1 (in_dtype
"float8_e4m3fn" / "e2m1") with fp32, packed UE8M0 or e4m3 scales over (gm, gk)
blocks (runtime sizes, gk a multiple of 8). The amax is taken over data * x_sf and
the data is scaled by the one product x_sf * sf_inv, as docs/SPEC.md §2.1 says.

The "roundtrip" variants serve per_token_cast_and_cast_back (fake quantization) in one
pass: each value is quantized as above, decoded and multiplied by its scale in fp32
(cast_back's formula) and written back in the input dtype, in place; no scales are stored.

Compile-time (one cubin each): input dtype and input scale kind, output format,
channels per scale block, scale storage kind, and whether scales are supplied by
the caller, and stochastic rounding (docs/SPEC.md §2.2: the quad hash of
kernels/common/stochastic.py, quad index = position of the 4 values within the row).
Runtime (kernel arguments): token count, hidden size, every stride, round_sf
for fp32 scales, whether to store the data (the sf-only variant) and the amax
floor. Row-major and TMA-aligned column-major scales differ only in strides,
so one cubin serves both; packed UE8M0 is addressed as bytes with a
(row, word, byte) stride triple.

Thread mapping: a warp covers 32*VEC consecutive channels of R rows, VEC being
one 16-byte load. The lanes of a scale block (g/VEC of them, aligned) reduce
their amax with xor shuffles, splitting the rows between them over the last
distances (bf16 input: two rows per bf16x2 register). CTAs whose rows all exist
load and store without per-row guards. Only the FP8 cast with computed fp32
scales uses shared memory and one block barrier: it writes its scales per CTA.
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.quant (PER_TOKEN_CAST): the compile-time parameters, their allowed values and
# cross-constraints, and the launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL

WARPS_PER_CTA = 4
# __launch_bounds__ minimum CTAs per SM, by output format, for plain (bf16/fp32) input. FP4 casts are
# issue-bound and 62 registers left them at 8 CTAs (50 % occupancy): 10 CTAs cap them at 48 registers without
# spills and measured 79 % of copy instead of 76 % (benchmarks/results/tuning/2026-12-01-per-token-cast-ab.json).
# e4m3 needs no cap; pre-quantized inputs decode more per element and spill under the cap.
MIN_BLOCKS_PER_SM = {"e2m1": 10}
FMT_MAX = {"e4m3": 448.0, "e2m1": 6.0}
SF_STORAGE = {"fp32": "float32", "e4m3": "float8_e4m3fn", "ue8m0": "uint8"}


def elems_per_load(in_dtype):
    """Elements per thread and row: one 16-byte load of bf16/fp32; 8 elements (8 or 4 bytes) of FP8/FP4."""
    return 4 if in_dtype == "float32" else 8


def build(p, arch):
    """TileLang PrimFunc for one variant. ``arch`` does not change this kernel."""
    import tilelang.language as T

    from kernels.common.cuda_source import (ABSMAX8_BF16_SOURCE, BF16X2_MAX_SOURCE, PRMT_SOURCE, U32_AT_SOURCE,
                                            absmax8_bf16, bf16_values)
    from kernels.common.numerics import e2m1_pack, e2m1_value, pow2, pow2_inverse, round_sf_exponent
    from kernels.common.stochastic import fp32_bits, quad_random_bits, to_e4m3x4_stochastic

    del arch
    in_dtype, in_sf_kind, fmt, g = p["in_dtype"], p["in_sf_kind"], p["fmt"], p["num_per_channels"]
    sf_kind, precomputed = p["sf_kind"], bool(p["precomputed"])
    quantized_in = in_sf_kind != "none"
    # Packed FP4 input is read as one uint32 (8 nibbles) per thread and row.
    x_storage = "uint32" if in_dtype == "e2m1" else in_dtype
    in_sf_storage = SF_STORAGE.get(in_sf_kind, "float32")
    vec = elems_per_load(in_dtype)
    lanes_per_block = g // vec
    shuffle_steps = lanes_per_block.bit_length() - 1  # log2
    rows = p["rows"]
    spread = lanes_per_block >= rows  # enough lanes per block to give each row its own
    reduce_distances = [lanes_per_block >> (s + 1) for s in range(shuffle_steps)]  # xor-shuffle distances
    scalar_iters = 1 if spread else rows
    store_lanes = rows if spread else 1
    seg = 32 * vec
    fmt_max = FMT_MAX[fmt]
    # e4m3 is stored element-wise; e2m1 as one packed word per thread (vec nibbles).
    out_storage = "float8_e4m3fn" if fmt == "e4m3" else ("uint32" if vec == 8 else "uint16")
    stochastic = bool(p["stochastic"])
    if stochastic:  # four e4m3 bytes are built as one word per quad
        out_storage = "uint32"
    roundtrip = bool(p["roundtrip"])
    if roundtrip:  # dequantized values, in place over x
        out_storage = in_dtype
    sf_storage = SF_STORAGE[sf_kind]
    # Computed fp32 scales of the FP8 cast are staged in shared memory and written per CTA (the flush below says
    # why). Only there: the issue-bound FP4 casts ran slower with the extra barrier and flush (e2m1 1x32: 79.9
    # instead of 78.9-79.2 us with fp32 scales, 78.9-79.8 instead of 76.0-76.6 us with e4m3 scales, A/B in
    # benchmarks/results/2026-12-01-81164c141b/extra/ab), and the stochastic cast is issue-bound too.
    staged = fmt == "e4m3" and sf_kind == "fp32" and not precomputed and not roundtrip and not stochastic
    rows_in_y = staged and in_sf_kind == "none"  # the grid order below
    cta_blocks = WARPS_PER_CTA * seg // g  # scale blocks per row of one CTA
    flush_iters = -(-rows * cta_blocks // (32 * WARPS_PER_CTA))
    packed_amax = in_dtype == "bfloat16" and not precomputed  # bf16x2 maxima (kernels/common/cuda_source.py)
    # CUDA helpers, in one import: TileLang refuses a second import_source with other text in one kernel.
    paired = packed_amax and lanes_per_block >= rows and rows % 2 == 0  # two rows' amax per register
    helpers = (ABSMAX8_BF16_SOURCE if packed_amax else "") + (BF16X2_MAX_SOURCE if paired else "") + \
        (PRMT_SOURCE if fmt == "e2m1" else "") + \
        (U32_AT_SOURCE if in_dtype == "bfloat16" else "") or None
    x_numel, out_numel, sf_numel, x_sf_numel = T.dynamic("x_numel, out_numel, sf_numel, x_sf_numel")

    @T.macro
    def store_sf(sf, sf_tile, sf_idx, r, b, value):
        """A computed scale: into the CTA's shared tile when staged (flushed at the end), else straight out."""
        if staged:
            sf_tile[r, b] = value
        else:
            sf[sf_idx] = value

    def absmax8_bf16x2(T, first):
        return T.call_extern("uint32", "tk_absmax8_bf16x2", T.address_of(first))

    def hmax2(a, b):
        return T.call_extern("uint32", "tk_hmax2_bf16", a, b)

    def value(xr, xw, r, i):
        """Input element (r, i) of this thread as fp32 (before any input scale)."""
        return e2m1_value(xw[r], i) if in_dtype == "e2m1" else T.Cast("float32", xr[r, i])

    def encoded(xr, vf, r):
        """The row's elements to encode, as fp32. FP4 input is decoded into ``vf`` first, because inlining
        the decode into the FP4 encode multiplies the expression and stalls lowering for a minute; bf16
        pairs are widened from their 32-bit words (cuda_source.bf16_values says why)."""
        if in_dtype == "e2m1":
            return [vf[i] for i in range(vec)]
        if in_dtype == "bfloat16":
            return bf16_values(T, [xr[r, 2 * j] for j in range(vec // 2)])
        return [T.Cast("float32", xr[r, i]) for i in range(vec)]

    @T.macro
    def quantize_row(r, row, first_row, col, xr, xw, vf, ql, sf_inv, out, out_stride_unit):
        """Quantize and store row r of this thread (a row that exists)."""
        if stochastic:
            # out_stride_unit counts vec bytes; a quad of e4m3 is one 4-byte word.
            base = T.Cast("int64", row) * (out_stride_unit * (vec // 4)) + col // 4
            for j in T.unroll(vec // 4):
                bits = [fp32_bits(T.Cast("float32", xr[r, 4 * j + i]) * sf_inv[r]) for i in range(4)]
                r0, _ = quad_random_bits(*bits, col // 4 + j)
                out[base + j] = to_e4m3x4_stochastic(*bits, r0)
        elif fmt == "e4m3":
            if in_dtype == "e2m1":
                for i in T.unroll(vec):
                    ql[i] = T.Cast("float8_e4m3fn", value(xr, xw, r, i) * sf_inv[r])
            else:
                if in_dtype == "bfloat16":  # widened from pair words (as `encoded`), then the same paired cvt
                    for i, v in enumerate(encoded(xr, vf, r)):
                        vf[i] = v
                    for i in T.vectorized(vec):  # paired cvt.satfinite.e4m3x2
                        ql[i] = T.Cast("float8_e4m3fn", vf[i] * sf_inv[r])
                else:
                    for i in T.vectorized(vec):  # paired cvt.satfinite.e4m3x2
                        ql[i] = T.Cast("float8_e4m3fn", T.Cast("float32", xr[r, i]) * sf_inv[r])
            for i in T.vectorized(vec):
                out[first_row * out_stride_unit * vec + col + T.Cast("int64", out_stride_unit * (r * vec))
                    + i] = ql[i]
        else:
            if in_dtype == "e2m1":
                for i in T.unroll(vec):
                    vf[i] = e2m1_value(xw[r], i)
            word = e2m1_pack([v * sf_inv[r] for v in encoded(xr, vf, r)])
            out[first_row * out_stride_unit + col // vec + T.Cast("int64", out_stride_unit * r)] = \
                T.Cast(out_storage, word)

    @T.prim_func
    def per_token_cast(
        x: T.Tensor((x_numel,), x_storage),
        out: T.Tensor((out_numel,), out_storage),
        sf: T.Tensor((sf_numel,), sf_storage),
        num_tokens: T.int32,
        hidden_div64: T.int32,
        x_stride_vec: T.int32,  # row stride of x in units of vec elements
        out_stride_unit: T.int32,  # e4m3: in units of vec bytes; e2m1: in packed words; roundtrip: vec elements
        sf_stride_t: T.int32,  # scale strides in sf elements (bytes for ue8m0)
        sf_stride_k: T.int32,  # ue8m0: stride of one int32 word of 4 scales
        round_sf: T.int32,
        write_data: T.int32,
        clamp_min: T.float32,
        x_sf: T.Tensor((x_sf_numel,), in_sf_storage),  # scales of pre-quantized input
        in_sf_stride_t: T.int32,  # ... in elements (bytes and a word stride for ue8m0), like sf_stride_*
        in_sf_stride_k: T.int32,
        in_block_m: T.int32,  # the input's scale block (gm, gk)
        in_block_k: T.int32,
        # The grid, ceil(T / rows) x ceil(H / (seg * WARPS_PER_CTA)), computed by the host: as T.ceildiv
        # of the sizes, TileLang lowers the extents to shifts, and its Z3-backed Simplify then spends
        # ~0.45 s per variant proving the row guards against them (bit-vector reasoning; perf on the build
        # machine). The kernel body is the same either way; lowering all variants takes half the time.
        num_row_blocks: T.int32,
        num_col_blocks: T.int32,
    ):
        # Grid order: CTAs launched one after another cover the column blocks of the same rows for the staged FP8
        # cast (row blocks in y, so at most 65535 of them: python/kernelkiln/quant/_per_token.py launches longer
        # inputs in chunks). 83.4-83.9 us, 99.7-100.1 % of copy, against 88.8-89.2 us with row blocks fastest
        # (e4m3 1x128, fp32 scales, row-major or column-major alike; A/B in
        # benchmarks/results/2026-12-01-a617b1c9a5/extra/ab-swapgrid). Why this order is faster was not profiled.
        with T.Kernel(num_col_blocks if rows_in_y else num_row_blocks, num_row_blocks if rows_in_y else num_col_blocks,
                      threads=32 * WARPS_PER_CTA) as (b0, b1):
            bx = b1 if rows_in_y else b0
            by = b0 if rows_in_y else b1
            if helpers is not None:
                T.import_source(helpers)
            if fmt in MIN_BLOCKS_PER_SM and not quantized_in:
                T.annotate_min_blocks_per_sm(MIN_BLOCKS_PER_SM[fmt])
            tx = T.get_thread_binding()
            lane = tx % 32
            col = (by * WARPS_PER_CTA + tx // 32) * seg + lane * vec
            col_ok = col < hidden_div64 * 64
            # 64-bit offsets of this CTA's first row, plus r row strides per row: the same values as
            # (row * stride + col), written so that nvcc shares the row-0 product across the rows
            # instead of rebuilding a 64-bit multiply per row and access.
            first_row = T.Cast("int64", bx * rows)
            kb = col // g
            sub = lane % lanes_per_block
            # Raw input stays in its own dtype (bf16: half the registers of fp32), so more rows'
            # loads are in flight per thread; it is widened to fp32 where it is used.
            xr = T.alloc_local((rows, vec), "uint8" if in_dtype == "e2m1" else in_dtype)
            xw = T.alloc_local((rows,), "uint32")  # packed FP4 input
            xs = T.alloc_local((rows,), "float32")  # input scale of this thread's 8 elements
            vf = T.alloc_local((vec,), "float32")  # one row of decoded FP4 (keeps expressions small)
            amax = T.alloc_local((rows,), "float32")
            pm = T.alloc_local((max(rows // 2, 1),), "uint32")  # bf16x2 amax of row pairs
            my_amax = T.alloc_local((1,), "float32")
            inv = T.alloc_local((1,), "float32")
            sf_inv = T.alloc_local((rows,), "float32")
            ql = T.alloc_local((vec,), "float8_e4m3fn")
            deq = T.alloc_local((1,), "float32")  # roundtrip: the scale that decodes, as cast_back reads it
            sf_back = T.alloc_local((rows,), "float32")
            qword = T.alloc_local((1,), "uint32")
            sf_tile = T.alloc_shared((rows, cta_blocks) if staged else (1, 1), sf_storage)  # the CTA's scales

            T.pdl_sync()
            if in_dtype != "e2m1":
                # A CTA whose rows all exist loads without per-row guards: nvcc then forms row 0's address
                # once and steps it by the row stride, where guarded loads rebuilt a 64-bit address per row.
                if bx * rows + rows <= num_tokens and col_ok:
                    for r in T.unroll(rows):
                        for i in T.vectorized(vec):
                            xr[r, i] = x[first_row * x_stride_vec * vec + col
                                         + T.Cast("int64", x_stride_vec * (r * vec)) + i]
                else:
                    for r in T.unroll(rows):
                        if bx * rows + r < num_tokens and col_ok:
                            for i in T.vectorized(vec):
                                xr[r, i] = x[first_row * x_stride_vec * vec + col
                                             + T.Cast("int64", x_stride_vec * (r * vec)) + i]
                        else:
                            for i in T.unroll(vec):
                                xr[r, i] = T.Cast(in_dtype, 0)
            for r in T.unroll(rows):
                row = bx * rows + r
                if in_dtype == "e2m1":
                    xw[r] = T.uint32(0)
                    if row < num_tokens and col_ok:
                        xw[r] = x[first_row * x_stride_vec + col // vec + T.Cast("int64", x_stride_vec * r)]
                if quantized_in:
                    xs[r] = T.float32(0)
                    if row < num_tokens and col_ok:
                        rb = T.Cast("int64", row // in_block_m)
                        kin = col // in_block_k
                        if in_sf_kind == "ue8m0":
                            byte = x_sf[rb * in_sf_stride_t + (kin // 4) * in_sf_stride_k + kin % 4]
                            xs[r] = T.reinterpret("float32", T.shift_left(T.Cast("uint32", byte), T.uint32(23)))
                        else:
                            xs[r] = T.Cast("float32", x_sf[rb * in_sf_stride_t + kin * in_sf_stride_k])

            if paired:
                # bf16 rows pair up: one register holds the bf16 amax of rows 2i and 2i+1, so every shuffle and
                # maximum serves two rows, and the lanes split the rows as below, the last split between the
                # two halves of the word. Exact: bf16 maxima are the fp32 maxima of the widened values.
                for i in T.unroll(rows // 2):
                    even, odd = absmax8_bf16x2(T, xr[2 * i, 0]), absmax8_bf16x2(T, xr[2 * i + 1, 0])
                    pm[i] = hmax2(T.call_extern("uint32", "__byte_perm", even, odd, T.uint32(0x5410)),
                                  T.call_extern("uint32", "__byte_perm", even, odd, T.uint32(0x7632)))
                for d in reduce_distances:
                    if d >= rows:
                        for i in T.unroll(rows // 2):
                            pm[i] = hmax2(pm[i], T.shfl_xor(pm[i], d))
                    elif d >= 2:
                        upper = T.bitwise_and(sub, d) != 0
                        for j in T.unroll(d // 2):
                            kept = T.if_then_else(upper, pm[j + d // 2], pm[j])
                            sent = T.if_then_else(upper, pm[j], pm[j + d // 2])
                            pm[j] = hmax2(kept, T.shfl_xor(sent, d))
                    else:
                        upper = T.bitwise_and(sub, 1) != 0
                        kept = T.call_extern("uint32", "__byte_perm", pm[0], pm[0],
                                             T.if_then_else(upper, T.uint32(0x3232), T.uint32(0x1010)))
                        sent = T.call_extern("uint32", "__byte_perm", pm[0], pm[0],
                                             T.if_then_else(upper, T.uint32(0x1010), T.uint32(0x3232)))
                        pm[0] = hmax2(kept, T.shfl_xor(sent, 1))
                amax[0] = T.max(T.reinterpret("float32", T.shift_left(pm[0], T.uint32(16))), clamp_min)
            elif not precomputed:
                for r in T.unroll(rows):
                    if packed_amax:
                        amax[r] = absmax8_bf16(T, xr[r, 0])
                    else:
                        amax[r] = T.float32(0)
                        for i in T.unroll(vec):
                            amax[r] = T.max(amax[r], T.abs(value(xr, xw, r, i)))
                    if quantized_in:  # max |d * s| == max|d| * s for a scale s >= 0 (rounding is monotonic)
                        amax[r] = amax[r] * xs[r]
                    if not spread:
                        for s in T.unroll(shuffle_steps):
                            amax[r] = T.max(amax[r], T.shfl_xor(amax[r], T.shift_right(lanes_per_block // 2, s)))
                        amax[r] = T.max(amax[r], clamp_min)
                if spread:
                    # The block's lanes reduce all rows over the distances >= rows, then halve the rows at each
                    # remaining distance d: a lane keeps half of its rows (by its bit d) and sends the other half
                    # to its partner, one shuffle per kept row. Lane `sub` ends with row sub % rows alone in
                    # amax[0], the row whose scale it computes below: for 4 rows 3 shuffles instead of 8 over
                    # the last two distances, and no select of its row afterwards. (Maxima are exact, so the
                    # order of the reduction does not change any bit.)
                    for d in reduce_distances:
                        if d >= rows:
                            for r in T.unroll(rows):
                                amax[r] = T.max(amax[r], T.shfl_xor(amax[r], d))
                        else:
                            upper = T.bitwise_and(sub, d) != 0
                            for j in T.unroll(d):
                                kept = T.if_then_else(upper, amax[j + d], amax[j])
                                sent = T.if_then_else(upper, amax[j], amax[j + d])
                                amax[j] = T.max(kept, T.shfl_xor(sent, d))
                    amax[0] = T.max(amax[0], clamp_min)

            # Per-row scale math (IEEE divisions for the plain and E4M3 scales) is spread over the
            # lanes of a scale block: lane `sub` handles row `sub % rows` once, then the block's
            # lanes fetch each row's multiplier with a shuffle. This does rows x fewer divisions.
            for j in T.unroll(scalar_iters):
                if spread:
                    my_r = sub % rows
                else:
                    my_r = j
                my_row = bx * rows + my_r
                row_ok = my_row < num_tokens and col_ok
                sf_idx = T.Cast("int64", my_row) * sf_stride_t + kb * sf_stride_k
                if not precomputed:
                    my_amax[0] = amax[0] if spread else amax[j]
                if precomputed:
                    inv[0] = T.float32(1)
                    if row_ok:
                        inv[0] = T.float32(1) / T.Cast("float32", sf[sf_idx])
                else:
                    writer = row_ok and sub < store_lanes and not roundtrip
                    if sf_kind == "fp32":
                        if round_sf != 0:
                            e = round_sf_exponent(my_amax[0], fmt_max)
                            inv[0] = pow2_inverse(e)
                            if roundtrip:
                                deq[0] = pow2(e)
                            if writer:
                                store_sf(sf, sf_tile, sf_idx, my_r, kb - by * cta_blocks, pow2(e))
                        else:
                            inv[0] = T.float32(fmt_max) / my_amax[0]
                            if roundtrip:
                                deq[0] = my_amax[0] / T.float32(fmt_max)
                            if writer:
                                store_sf(sf, sf_tile, sf_idx, my_r, kb - by * cta_blocks,
                                         my_amax[0] / T.float32(fmt_max))
                    elif sf_kind == "e4m3":
                        sf_q = T.Cast("float8_e4m3fn", my_amax[0] / T.float32(fmt_max))
                        inv[0] = T.float32(1) / T.Cast("float32", sf_q)
                        if roundtrip:
                            deq[0] = T.Cast("float32", sf_q)
                        if writer:
                            store_sf(sf, sf_tile, sf_idx, my_r, kb - by * cta_blocks, sf_q)
                    else:
                        e = round_sf_exponent(my_amax[0], fmt_max)
                        inv[0] = pow2_inverse(e)
                        if writer:
                            sf[T.Cast("int64", my_row) * sf_stride_t + (kb // 4) * sf_stride_k + kb % 4] = \
                                T.Cast("uint8", e + 127)
                if spread:
                    for r in T.unroll(rows):
                        sf_inv[r] = T.shfl_sync(inv[0], lane - sub + r)
                        if roundtrip:
                            sf_back[r] = T.shfl_sync(deq[0], lane - sub + r)
                else:
                    sf_inv[j] = inv[0]
                    if roundtrip:
                        sf_back[j] = deq[0]
            if quantized_in:  # one multiplier per element: x_sf * sf_inv (docs/SPEC.md §2.1)
                for r in T.unroll(rows):
                    sf_inv[r] = xs[r] * sf_inv[r]

            if roundtrip:
                for r in T.unroll(rows):
                    if bx * rows + r < num_tokens and col_ok:
                        # quantize, decode, times the scale in fp32, round to the input dtype: cast_back's formula
                        if fmt == "e4m3":
                            for i in T.vectorized(vec):
                                ql[i] = T.Cast("float8_e4m3fn", T.Cast("float32", xr[r, i]) * sf_inv[r])
                            for i in T.unroll(vec):
                                vf[i] = T.Cast("float32", ql[i]) * sf_back[r]
                        else:
                            qword[0] = e2m1_pack([v * sf_inv[r] for v in encoded(xr, vf, r)])
                            for i in T.unroll(vec):
                                vf[i] = e2m1_value(qword[0], i) * sf_back[r]
                        for i in T.vectorized(vec):
                            out[first_row * out_stride_unit * vec + col + T.Cast("int64", out_stride_unit * (r * vec))
                                + i] = T.Cast(in_dtype, vf[i])
            elif write_data != 0:
                # As the loads: full CTAs store without per-row guards, so each row's address is one step from
                # the previous row's (the guarded rows rebuilt it from 64-bit products).
                if bx * rows + rows <= num_tokens and col_ok:
                    for r in T.unroll(rows):
                        quantize_row(r, bx * rows + r, first_row, col, xr, xw, vf, ql, sf_inv, out, out_stride_unit)
                else:
                    for r in T.unroll(rows):
                        if bx * rows + r < num_tokens and col_ok:
                            quantize_row(r, bx * rows + r, first_row, col, xr, xw, vf, ql, sf_inv, out, out_stride_unit)
            if staged:
                # The CTA writes its rows x cta_blocks scales after its data, each row's scales contiguous in
                # one store instruction. Written where they were computed, each warp stored a few bytes per
                # row of row-major scales (e4m3 1x128: 8 bytes in each of 4 rows), and those cost ~1 point of
                # copy bandwidth: 94.4-94.8 % against 95.3-95.8 % with column-major fp32 scales (A/B of
                # benchmarks/bench_store_ab.py in benchmarks/results/2026-12-01-8e6ddb95c4/extra/ab).
                # Row-major scales go row by row (consecutive threads, consecutive blocks), other layouts
                # (TMA-aligned column-major) block by block (consecutive threads, consecutive rows).
                T.sync_threads()
                for i in T.unroll(flush_iters):
                    idx = tx + i * (32 * WARPS_PER_CTA)
                    r = T.if_then_else(sf_stride_k == 1, idx // cta_blocks, idx % rows)
                    b = T.if_then_else(sf_stride_k == 1, idx % cta_blocks, idx // rows)
                    if idx < rows * cta_blocks and bx * rows + r < num_tokens and \
                            (by * cta_blocks + b) * g < hidden_div64 * 64:
                        sf[T.Cast("int64", bx * rows + r) * sf_stride_t + (by * cta_blocks + b) * sf_stride_k] = \
                            sf_tile[r, b]
            T.pdl_trigger()

    return per_token_cast
