"""per_token_cast on Ascend (dav-3510): bf16 -> e4m3 / e2m1 with one scale per ``g`` channels of a row, fp32 scales
(plain or round_sf powers of two) or packed UE8M0, row-major or TMA-aligned column-major scales (docs/ASCEND.md).

The same op and numerics as kernels/quant/per_token_cast.py (docs/SPEC.md §2.1): amax over the block with NaN counted
as 0, floored at clamp_min; sf = amax / fmt_max and sf_inv = fmt_max / amax (two correctly rounded divisions), or
2**e / 2**-e with e = ceil(log2(amax * fp32(1/fmt_max))) from the bits; data = encode(x * sf_inv). The formulas are
kernels/common/ascend_numerics.py, shared with the CPU model that tests them against the references.

Layout: the kernel is persistent over tiles of ROWS rows x COLS channels (core c takes tiles c, c + num_cores, ...).
A tile is copied into the Unified Buffer (x_ub, double-buffered), then one SIMD region computes, per row, the blocks'
amax (integer maxima of |x| bits over 64-lane registers), the scales of the row's blocks in one register (a lane per
block), and the encoded data, written as bytes (e4m3: one byte per lane; e2m1: two nibbles per byte, even element
low, from a de-interleave of two registers of nibbles). Scales leave as 32-bit words: an fp32 scale, or four UE8M0
bytes (the packed int32 layout: byte j of word w = block 4w + j, unused bytes 0). Column-major scales are the
transpose of the tile's words (a SIMT region), so both layouts are one copy per tile; the layout is a runtime flag.

Compile-time: output format, channels per scale block (32 or 128), scale kind. Runtime: token count, hidden size
(a multiple of 64), the three leading dimensions, round_sf, clamp_min, the scale layout and the core count.
"""
PASS_CONFIGS = {}
ROWS = 32  # rows per tile
COLS = 512  # channels per tile (a multiple of 4 * 128: a tile holds whole UE8M0 words)
STAGES = 2
LANES = 64  # 32-bit lanes of a vector register (2048 bits)
SIMT_THREADS = 256  # the column-major transpose's threads at most (the peer's SIMT regions use up to 256)
# The launch's work items (docs/ASCEND.md): tiles, row tiles x column tiles.
WORK_ITEMS = f"((num_tokens + {ROWS - 1}) // {ROWS}) * ((hidden + {COLS - 1}) // {COLS})"
FMT_MAX = {"e4m3": 448.0, "e2m1": 6.0}


def build(p, arch):
    from tilelang.ascend import language as T
    from tilelang.ascend.language import simd as S

    from kernels.common import ascend_numerics as N

    del arch
    fmt, g, sf_kind = p["fmt"], p["num_per_channels"], p["sf_kind"]
    assert p["in_dtype"] == "bfloat16"
    fmt_max = FMT_MAX[fmt]
    packed = sf_kind == "ue8m0"
    per_word = 4 if packed else 1  # scales per 32-bit word
    groups = COLS // g  # scale blocks per tile row
    words = groups // per_word  # scale words per tile row
    out_cols = COLS if fmt == "e4m3" else COLS // 2  # bytes per tile row
    sf_dtype = "uint32" if packed else "float32"
    o = N.SimdOps(T, S)
    num_tokens, x_ld, out_ld, sf_rows, sf_ld = T.dynamic("num_tokens, x_ld, out_ld, sf_rows, sf_ld")

    @T.macro
    def load_f32(x_ub, r, v):
        # 64 bf16 into the even halves of 32-bit lanes, widened (exact)
        return S.vcvt(S.vld(x_ub[r, v * LANES], dist="UNPK_B16"), "float32")

    @T.prim_func
    def per_token_cast(
        x: T.Tensor((num_tokens, x_ld), "bfloat16"),
        out: T.Tensor((num_tokens, out_ld), "uint8"),
        sf: T.Tensor((sf_rows, sf_ld), sf_dtype),
        hidden: T.int32,
        round_sf: T.int32,
        clamp_min: T.float32,
        sf_col_major: T.int32,
        num_cores: T.int32,
    ):
        with T.Kernel(num_cores) as core:
            x_ub = T.alloc_shared((ROWS, COLS), "bfloat16")
            out_ub = T.alloc_shared((ROWS, out_cols), "uint8")
            amax_ub = T.alloc_shared((ROWS, LANES), "int32")
            inv_ub = T.alloc_shared((ROWS, LANES), "float32")
            if packed:
                sf_bytes_ub = T.alloc_shared((ROWS, LANES), "uint8")  # PK4_B32 stores: one byte per block
                sf_ub = T.Tensor((ROWS, LANES // 4), "uint32", sf_bytes_ub.data)
            else:
                sf_ub = T.alloc_shared((ROWS, LANES), "float32")
            sft_ub = T.alloc_shared((LANES, ROWS), sf_dtype)  # column-major: the tile's words transposed
            T.annotate_buffer_versions({x_ub: STAGES, out_ub: STAGES})
            col_tiles = T.ceildiv(hidden, COLS)
            # one work item per tile, row tiles outer (a core's consecutive items are neighbouring column tiles)
            for tile in T.Persistent([T.ceildiv(num_tokens, ROWS) * col_tiles], num_cores, core, group_size=1,
                                     num_stages=STAGES):
                tile_r = tile // col_tiles
                tile_c = tile % col_tiles
                r0 = tile_r * ROWS
                c0 = tile_c * COLS
                n_rows = T.min(ROWS, num_tokens - r0)
                width = T.min(COLS, hidden - c0)  # a multiple of 64
                n_vregs = width // LANES
                n_groups = T.ceildiv(width, g)
                n_words = T.ceildiv(n_groups, per_word)
                T.copy(x[r0:r0 + n_rows, c0:c0 + width], x_ub[0:n_rows, 0:width])
                with T.SimdVF():
                    lanes = S.vci(0, "int32")
                    low = S.pset(32, "PAT_VL32")
                    every = S.pset(32, "PAT_ALL")
                    high = S.pnot(low, every)
                    # 1. the blocks' amax as |x| bits (NaN as 0), one lane of amax_ub per block
                    for r in T.serial(n_rows):
                        if g == 32:
                            for v in T.serial(n_vregs):
                                a = N.abs_bits_nan_zero(o, o.bits(load_f32(x_ub, r, v)))
                                S.vsts(amax_ub[r, 2 * v], S.vcmax(a, low), dist="ONEPT_B32")
                                S.vsts(amax_ub[r, 2 * v + 1], S.vcmax(a, high), dist="ONEPT_B32")
                        else:  # g == 128: two registers per block; a half block at the end of a row is masked
                            for b in T.serial(n_groups):
                                a0 = N.abs_bits_nan_zero(o, o.bits(load_f32(x_ub, r, 2 * b)))
                                a1 = N.abs_bits_nan_zero(o, o.bits(load_f32(x_ub, r, 2 * b + 1)))
                                a1 = S.vsel(a1, o.i(0), S.vcmps(S.vdup(2 * b + 1, "int32"), n_vregs, op="lt"))
                                S.vsts(amax_ub[r, b], S.vcmax(S.vmax(a0, a1)), dist="ONEPT_B32")
                    S.mem_bar("VST_VLD")
                    # 2. the scales of a row's blocks, a lane each
                    clamp = o.bits(S.vdup(clamp_min, "float32"))
                    for r in T.serial(n_rows):
                        am = S.vld(amax_ub[r, 0])
                        if packed:
                            stored, inv = N.scales(o, am, clamp, fmt_max, "ue8m0")
                            stored = S.vsel(stored, o.i(0), S.vcmps(lanes, n_groups, op="lt"))  # unused bytes: 0
                            S.vsts(sf_bytes_ub[r, 0], T.reinterpret(stored, "uint8x256"), dist="PK4_B32")
                        else:
                            pow2_sf, pow2_inv = N.scales(o, am, clamp, fmt_max, "pow2")
                            div_sf, div_inv = N.scales(o, am, clamp, fmt_max, "div")
                            rounded = S.vcmps(S.vdup(round_sf, "int32"), 0, op="ne")
                            inv = S.vsel(pow2_inv, div_inv, rounded)
                            S.vsts(sf_ub[r, 0], o.float(S.vsel(pow2_sf, div_sf, rounded)))
                        S.vsts(inv_ub[r, 0], o.float(inv))
                    S.mem_bar("VST_VLD")
                    # 3. the data: x * sf_inv, encoded
                    for r in T.serial(n_rows):
                        if fmt == "e4m3":
                            for v in T.serial(n_vregs):
                                if g == 32:
                                    inv_v = S.vsel(S.vld(inv_ub[r, 2 * v], dist="BRC_B32"),
                                                   S.vld(inv_ub[r, 2 * v + 1], dist="BRC_B32"), low)
                                else:
                                    inv_v = S.vld(inv_ub[r, v // 2], dist="BRC_B32")
                                codes = N.e4m3_codes(o, S.vmul(load_f32(x_ub, r, v), inv_v))
                                S.vsts(out_ub[r, v * LANES], T.reinterpret(codes, "uint8x256"), dist="PK4_B32")
                        else:
                            # two registers (128 elements) -> 64 bytes; past the row's width the bytes are never
                            # copied out
                            for u in T.serial(T.ceildiv(n_vregs, 2)):
                                if g == 32:
                                    nib0 = N.e2m1_nibbles(o, S.vmul(load_f32(x_ub, r, 2 * u), S.vsel(
                                        S.vld(inv_ub[r, 4 * u], dist="BRC_B32"),
                                        S.vld(inv_ub[r, 4 * u + 1], dist="BRC_B32"), low)))
                                    nib1 = N.e2m1_nibbles(o, S.vmul(load_f32(x_ub, r, 2 * u + 1), S.vsel(
                                        S.vld(inv_ub[r, 4 * u + 2], dist="BRC_B32"),
                                        S.vld(inv_ub[r, 4 * u + 3], dist="BRC_B32"), low)))
                                else:
                                    inv_v = S.vld(inv_ub[r, u], dist="BRC_B32")
                                    nib0 = N.e2m1_nibbles(o, S.vmul(load_f32(x_ub, r, 2 * u), inv_v))
                                    nib1 = N.e2m1_nibbles(o, S.vmul(load_f32(x_ub, r, 2 * u + 1), inv_v))
                                even, odd = S.vdintlv(nib0, nib1)
                                packed_bytes = S.vor(even, S.vshls(odd, 4))
                                S.vsts(out_ub[r, u * LANES], T.reinterpret(packed_bytes, "uint8x256"),
                                       dist="PK4_B32")
                if fmt == "e4m3":
                    T.copy(out_ub[0:n_rows, 0:width], out[r0:r0 + n_rows, c0:c0 + width])
                else:
                    T.copy(out_ub[0:n_rows, 0:width // 2], out[r0:r0 + n_rows, c0 // 2:c0 // 2 + width // 2])
                w0 = tile_c * words
                if sf_col_major == 0:
                    T.copy(sf_ub[0:n_rows, 0:n_words], sf[r0:r0 + n_rows, w0:w0 + n_words])
                else:
                    with T.SimtVF(threads=min(SIMT_THREADS, ROWS * words)):
                        for w, r in T.Parallel(words, ROWS):
                            sft_ub[w, r] = sf_ub[r, w]
                    T.copy(sft_ub[0:n_words, 0:n_rows], sf[w0:w0 + n_words, r0:r0 + n_rows])

    return per_token_cast
