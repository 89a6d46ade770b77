"""per_channel_cast: column-wise (gm x 1 block) quantization bf16/fp32/e4m3 -> e4m3 (docs/SPEC.md §3.2).

One scale per column and gm-token block: sf[tb, c] from the amax of x[tb*gm:(tb+1)*gm, c],
with the §2.1 rules (fp32 amax/448 or round_sf power of two; UE8M0 bytes packed four
per int32 along M, "col pack": byte i of word [r, c] is token block 4r+i).

Compile-time: input dtype, gm (32 or 128), scale storage (fp32 or packed UE8M0), the input's
channel block g (e4m3 input only: 32 or 128; 0 for bf16/fp32) and the row mode:
  * "full": T % gm == 0, no row guard (2.1 per_channel_cast);
  * "tail": rows >= num_rows are outside x (a partial last token block; they count as absent
    from the amax and are not stored) -- v1 per_channel_cast_fused without pos_to_token;
  * "gather": output row n reads x row pos_to_token[n]; -1 marks a padding row, quantized as an
    all-zero row (its data is 0 and it cannot raise its block's amax), rows >= num_rows absent.
Pre-quantized e4m3 input (with fp32 scales x_sf[t, c // g] at runtime strides, so row-major,
column-major and token-sliced column-major all work): the amax is taken over data * x_sf and
the data is scaled by the one product x_sf * sf_inv (docs/SPEC.md §2.1), as kernelkiln.torch.cast
does. The amax is per column over rows that each have their own x_sf: |d * s| element by element
(a first version took each row's max over the thread's 16 columns, wrong for every column but
that row's largest; the H200 tests caught it).
Runtime: hidden size / 128, round_sf (fp32 scales), the amax floor, num_rows and the x_sf
strides. The token count is the grid's y extent (ceil(rows / gm) blocks); the host guarantees
H % 128 == 0 (and T % 128 == 0 in "full" mode).

Thread mapping: a CTA covers one token block (gm rows) and 32*VEC columns, VEC being one
16-byte load (8 bf16 / 4 fp32). Its 8 warps split the gm rows (gm/8 each) and every warp
row access is a contiguous 16-byte-per-lane run. A column's amax needs no shuffles: each
thread reduces its own rows, the 8 warp partials meet in 8 x 32*VEC floats of shared
memory (one barrier), and every thread then scales and stores its rows.
A thread holds GROUP (4) rows at a time. gm = 32 (4 rows a thread) stays in registers
between the two passes; gm = 128 (16 rows) reads its rows a second time for the store
pass, from L2 (the CTA read them microseconds before; ncu: DRAM reads = 1.0x x), because
holding all 16 rows took ~184 registers, one CTA per SM and no overlap of one CTA's loads
with another's barrier and stores. Measured on the H200 (bf16, gm = 128, T = 16384,
H = 7168): 114 us, ~74% of copy bandwidth; 8-row groups, 2 CTAs/SM, 4 or 16 warps
per CTA all measured slower (122-162 us).
The hidden size is passed as H / 128 so that every row offset is provably a multiple of
VEC: with a plain H, TileLang could not vectorize and issued 2-byte loads and 1-byte
stores (L1-bound, 44%).
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.quant_fused (PER_CHANNEL_CAST): the compile-time parameters, their defaults and
# constraints, and the launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL

WARPS = 8
GROUP = 4  # rows per thread held in registers at a time (loads in flight)
MIN_BLOCKS = 3  # CTAs per SM: one CTA's loads overlap another's barrier and stores
FMT_MAX = 448.0


def vec_of(in_dtype):
    return {"bfloat16": 8, "float32": 4, "float8_e4m3fn": 16}[in_dtype]  # one 16-byte load


def build(p, arch):
    """TileLang PrimFunc for one variant. ``arch`` does not change this kernel."""
    import tilelang.language as T

    from kernels.common.block_scale import fold_column_amax
    from kernels.common.numerics import pow2, pow2_inverse, round_sf_exponent

    del arch
    in_dtype, gm, sf_kind = p["in_dtype"], p["num_per_tokens"], p["sf_kind"]
    g_in, mode = p["in_block"], p["rows"]
    quantized_in = in_dtype == "float8_e4m3fn"
    vec = vec_of(in_dtype)
    rows = gm // WARPS  # rows per thread
    # FP8 input holds 16 channels a thread (one 16-byte load): 2 rows at a time fit the 80-register cap
    # of "full" mode; the row guards of "tail"/"gather" need one (2 spilled 8 bytes at 128 on sm_90a).
    group = min(GROUP if not quantized_in else (2 if mode == "full" else 1), rows)
    groups = rows // group
    cols = 32 * vec  # columns per CTA
    sf_storage = "float32" if sf_kind == "fp32" else "uint8"
    def source_row(row, num_rows, pos_to_token):
        """x row read by output row ``row`` (-1: padding); the pos read stays inside [0, N)."""
        if mode == "gather":
            return T.if_then_else(row < num_rows, pos_to_token[T.min(row, num_rows - 1)], -1)
        return row

    def in_scale(x_sf, src, col, stride_t, stride_k):
        # The thread's vec (16) channels lie in one g-channel block (g % 16 == 0, col % 16 == 0).
        return x_sf[T.Cast("int64", src) * stride_t + (col // g_in) * stride_k]

    def row_in(row, num_rows):
        return True if mode == "full" else row < num_rows

    @T.macro
    def load_row(x, x_sf, pos_to_token, xr, xs, r, row, col, col_ok, hidden, num_rows, x_sf_stride_t,
                 x_sf_stride_k):
        """The x row of output row `row` into xr[r] (its scale into xs[r]); zeros for padding (-1) or
        absent rows, so they neither raise the amax nor store non-zero data."""
        if mode == "full":
            if col_ok:
                for i in T.vectorized(vec):
                    xr[r, i] = x[T.Cast("int64", row) * hidden + col + i]
                if quantized_in:
                    xs[r] = in_scale(x_sf, row, col, x_sf_stride_t, x_sf_stride_k)
        else:
            src = source_row(row, num_rows, pos_to_token)
            if col_ok and row < num_rows and src >= 0:
                for i in T.vectorized(vec):
                    xr[r, i] = x[T.Cast("int64", src) * hidden + col + i]
                if quantized_in:
                    xs[r] = in_scale(x_sf, src, col, x_sf_stride_t, x_sf_stride_k)
            else:
                for i in T.unroll(vec):
                    xr[r, i] = T.Cast(in_dtype, 0)
                if quantized_in:
                    xs[r] = T.float32(0)

    x_numel, out_numel, sf_numel = T.dynamic("x_numel, out_numel, sf_numel")
    x_sf_numel, pos_numel = T.dynamic("x_sf_numel, pos_numel")

    @T.prim_func
    def per_channel_cast(
        x: T.Tensor((x_numel,), in_dtype),
        out: T.Tensor((out_numel,), "float8_e4m3fn"),
        sf: T.Tensor((sf_numel,), sf_storage),  # fp32 [T/gm, H], or the bytes of int32 [ceil(T/gm/4), H]
        num_token_blocks: T.int32,
        hidden_div128: T.int32,  # H / 128: makes every row offset provably a multiple of VEC (vector access)
        round_sf: T.int32,
        clamp_min: T.float32,
        x_sf: T.Tensor((x_sf_numel,), "float32"),  # e4m3 input: x_sf[t * x_sf_stride_t + (c // g) * x_sf_stride_k]
        x_sf_stride_t: T.int32,
        x_sf_stride_k: T.int32,
        pos_to_token: T.Tensor((pos_numel,), "int32"),  # "gather": source row of each output row, -1 = padding
        num_rows: T.int32,  # "tail"/"gather": output rows (T or N); ignored in "full" mode
    ):
        with T.Kernel(T.ceildiv(hidden_div128 * 128, cols), num_token_blocks, threads=32 * WARPS) as (bx, tb):
            # The row guards/gather need a few more registers: 3 CTAs/SM (80 regs) spilled there.
            T.annotate_min_blocks_per_sm(MIN_BLOCKS if mode == "full" else 2)
            tx = T.get_thread_binding()
            hidden = hidden_div128 * 128
            lane = tx % 32
            warp = tx // 32
            col = bx * cols + lane * vec
            col_ok = col < hidden
            xr = T.alloc_local((group, vec), in_dtype)
            amax = T.alloc_local((vec,), "float32")
            inv = T.alloc_local((vec,), "float32")
            sfv = T.alloc_local((vec,), "float32")
            ql = T.alloc_local((vec,), "float8_e4m3fn")
            xs = T.alloc_local((group,), "float32")  # input scale of each held row (e4m3 input)
            mult = T.alloc_local((vec,), "float32")
            part = T.alloc_shared((WARPS, cols), "float32")

            T.pdl_sync()
            for i in T.unroll(vec):
                amax[i] = T.float32(0)
            for grp in T.unroll(groups):
                for r in T.unroll(group):
                    load_row(x, x_sf, pos_to_token, xr, xs, r, tb * gm + warp * rows + grp * group + r, col,
                             col_ok, hidden, num_rows, x_sf_stride_t, x_sf_stride_k)
                for r in T.unroll(group):
                    if quantized_in:  # |d * s| = |d| * s (s >= 0), per column: rows have their own s
                        for i in T.unroll(vec):
                            amax[i] = T.max(amax[i], T.abs(T.Cast("float32", xr[r, i])) * xs[r])
                    else:
                        for i in T.unroll(vec):  # fmaxf: a NaN element does not raise the amax
                            amax[i] = T.max(amax[i], T.abs(T.Cast("float32", xr[r, i])))
            fold_column_amax(part, amax, warp, lane, vec, WARPS, clamp_min)

            for i in T.unroll(vec):
                if sf_kind == "fp32":
                    if round_sf == 0:  # sf_inv = 448 / amax directly, not 1 / sf (§2.1)
                        inv[i] = T.float32(FMT_MAX) / amax[i]
                        sfv[i] = amax[i] / T.float32(FMT_MAX)
                    else:
                        inv[i] = pow2_inverse(round_sf_exponent(amax[i], FMT_MAX))
                        sfv[i] = pow2(round_sf_exponent(amax[i], FMT_MAX))
                else:
                    inv[i] = pow2_inverse(round_sf_exponent(amax[i], FMT_MAX))
                    sfv[i] = pow2(round_sf_exponent(amax[i], FMT_MAX))
            if warp == 0 and col_ok:
                if sf_kind == "fp32":
                    for i in T.vectorized(vec):
                        sf[T.Cast("int64", tb) * hidden + col + i] = sfv[i]
                else:
                    # Byte (tb % 4) of int32 word [tb // 4, c]: the biased exponent of 2**e.
                    for i in T.unroll(vec):
                        sf[(T.Cast("int64", tb // 4) * hidden + col + i) * 4 + tb % 4] = T.Cast(
                            "uint8", T.shift_right(T.reinterpret("int32", sfv[i]), 23))

            for grp in T.unroll(groups):
                for r in T.unroll(group):
                    row = tb * gm + warp * rows + grp * group + r
                    if groups > 1:  # one group stays in registers; more are read again (L2 hits)
                        load_row(x, x_sf, pos_to_token, xr, xs, r, row, col, col_ok, hidden, num_rows,
                                 x_sf_stride_t, x_sf_stride_k)
                    if col_ok and row_in(row, num_rows):
                        if quantized_in:  # one multiplier per element: x_sf * sf_inv (docs/SPEC.md §2.1)
                            for i in T.unroll(vec):
                                mult[i] = xs[r] * inv[i]
                            for i in T.vectorized(vec):
                                ql[i] = T.Cast("float8_e4m3fn", T.Cast("float32", xr[r, i]) * mult[i])
                        else:
                            for i in T.vectorized(vec):  # saturating cvt: |x * inv| <= 448 up to rounding
                                ql[i] = T.Cast("float8_e4m3fn", T.Cast("float32", xr[r, i]) * inv[i])
                        for i in T.vectorized(vec):
                            out[T.Cast("int64", row) * hidden + col + i] = ql[i]
            T.pdl_trigger()

    return per_channel_cast
