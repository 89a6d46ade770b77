"""v1 per_channel_cast_and_transpose and swiglu_forward_and_per_channel_cast_and_transpose (docs/SPEC.md §3.2).

One scale per column and gm-token block (sf [T/gm, C] fp32, §2.1 rules), data e4m3 either
transposed (q [C, T]) or row-major (q [T, C]). The quantized value is either the bf16 input
itself ("plain") or the fp32 SwiGLU of x [T, 2C] (gate = left half, up = right half, optional
clamp gate <= c, -c <= up <= c), in the exact op order of kernels/quant/swiglu_forward.py:
    e = expf(-a); d = 1 + e; s = a / d; y = s * u        (one IEEE rounding per step)

Compile-time: prologue (plain / swiglu), gm (32 or 128), transpose on/off.
Runtime: C / 64 (provably vector-aligned row offsets), T / 128, round_sf, clamp on/off and
value, amax floor. One cubin serves every shape.

Thread mapping (as kernels/quant/per_channel_cast.py): a CTA covers gm rows x 256 columns;
each lane owns 8 consecutive columns (one 16-byte bf16 load per row), the 8 warps split the
rows, warp partial amaxes meet in shared memory. The store pass recomputes the values (a
second read of x, L2 hits for gm = 128) and quantizes. Transposed: each thread writes its
fp8 bytes into a shared tile, column slot (i * 32 + lane) for column lane * 8 + i with a
row pitch of gm + 4 bytes, so the 32 lanes of a byte store hit 32 different banks; after
one barrier every thread copies 16-byte runs of a column (gm contiguous output bytes) to
out[c, t] with 16-byte global stores.
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.quant_fused (PER_CHANNEL_TRANSPOSE): prologue, gm and transpose, their
# constraint, and the launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL

WARPS = 8
VEC = 8  # bf16 per 16-byte load
COLS = 32 * VEC  # columns per CTA
GROUP = 4
FMT_MAX = 448.0


def build(p, arch):
    """TileLang PrimFunc for one variant. ``arch`` does not change this kernel."""
    import tilelang.language as T

    from kernels.common.block_scale import fold_column_amax
    from kernels.common.numerics import pow2, pow2_inverse, round_sf_exponent

    del arch
    swiglu, gm, transpose = p["prologue"] == "swiglu", p["num_per_tokens"], p["transpose"]
    rows = gm // WARPS
    groups = rows // GROUP
    pitch = gm + 4  # bytes per column slot of the transpose tile (odd word pitch: no bank conflicts)
    # The SwiGLU of gm = 128 (4 groups, each evaluated twice) fully unrolled was ~8K instructions per
    # thread: ncu showed instruction-fetch stalls ("no_instruction") and 24 % issue use (12.7 % of copy
    # bandwidth, benchmarks/results/2026-12-01-bbce7ba906/profile). Its group loops stay loops.
    group_loop = T.serial if swiglu and groups > 1 else T.unroll
    chunks = gm // 16  # 16-byte output runs per column
    x_numel, out_numel, sf_numel = T.dynamic("x_numel, out_numel, sf_numel")

    def fdiv(a, b):
        return T.call_extern("float32", "__fdiv_rn", a, b)

    def fmul(a, b):
        return T.call_extern("float32", "__fmul_rn", a, b)

    @T.macro
    def load_group(x, xg, xu, y, a, u, tb, warp, col, col_ok, grp, x_stride, hidden, use_clamp, clamp_value):
        """y[r, i] = the fp32 value to quantize, rows grp*GROUP.. of this thread (0 off the edge)."""
        for r in T.unroll(GROUP):
            row = tb * gm + warp * rows + grp * GROUP + r
            if col_ok:
                for i in T.vectorized(VEC):
                    xg[r, i] = x[T.Cast("int64", row) * x_stride + col + i]
                if swiglu:
                    for i in T.vectorized(VEC):
                        xu[r, i] = x[T.Cast("int64", row) * x_stride + hidden + col + i]
            else:
                for i in T.unroll(VEC):
                    xg[r, i] = T.bfloat16(0)
                    xu[r, i] = T.bfloat16(0)
        for r in T.unroll(GROUP):
            for i in T.unroll(VEC):
                if swiglu:
                    a[0] = T.Cast("float32", xg[r, i])
                    u[0] = T.Cast("float32", xu[r, i])
                    if use_clamp != 0:  # selects: NaN stays NaN, as torch.where in the reference
                        a[0] = T.if_then_else(a[0] > clamp_value, clamp_value, a[0])
                        u[0] = T.if_then_else(u[0] > clamp_value, clamp_value,
                                              T.if_then_else(u[0] < -clamp_value, -clamp_value, u[0]))
                    d = T.call_extern("float32", "__fadd_rn", T.float32(1),
                                      T.call_extern("float32", "expf", -a[0]))
                    y[r, i] = fmul(fdiv(a[0], d), u[0])
                else:
                    y[r, i] = T.Cast("float32", xg[r, i])


    @T.prim_func
    def per_channel_transpose(
        x: T.Tensor((x_numel,), "bfloat16"),  # [T, C] or [T, 2C] (swiglu)
        out: T.Tensor((out_numel,), "float8_e4m3fn"),  # [C, T] or [T, C]
        sf: T.Tensor((sf_numel,), "float32"),  # [T/gm, C]
        cols_div64: T.int32,  # C / 64
        tokens_div128: T.int32,  # T / 128
        round_sf: T.int32,
        use_clamp: T.int32,
        clamp_value: T.float32,
        clamp_min: T.float32,
    ):
        with T.Kernel(T.ceildiv(cols_div64 * 64, COLS), tokens_div128 * (128 // gm), threads=32 * WARPS) as (bx, tb):
            tx = T.get_thread_binding()
            hidden = cols_div64 * 64
            num_tokens = tokens_div128 * 128
            x_stride = hidden * 2 if swiglu else hidden
            lane = tx % 32
            warp = tx // 32
            col = bx * COLS + lane * VEC
            col_ok = col < hidden
            xg = T.alloc_local((GROUP, VEC), "bfloat16")
            xu = T.alloc_local((GROUP, VEC), "bfloat16")
            y = T.alloc_local((GROUP, VEC), "float32")
            amax = T.alloc_local((VEC,), "float32")
            inv = T.alloc_local((VEC,), "float32")
            sfv = T.alloc_local((VEC,), "float32")
            ql = T.alloc_local((VEC,), "float8_e4m3fn")
            a = T.alloc_local((1,), "float32")
            u = T.alloc_local((1,), "float32")
            part = T.alloc_shared((WARPS, COLS), "float32")
            tile = T.alloc_shared((COLS * pitch if transpose else 16,), "float8_e4m3fn")
            run = T.alloc_local((16,), "float8_e4m3fn")

            T.pdl_sync()
            for i in T.unroll(VEC):
                amax[i] = T.float32(0)
            for grp in group_loop(groups):
                load_group(x, xg, xu, y, a, u, tb, warp, col, col_ok, grp, x_stride, hidden, use_clamp, clamp_value)
                for r in T.unroll(GROUP):
                    for i in T.unroll(VEC):  # fmaxf: a NaN element does not raise the amax
                        amax[i] = T.max(amax[i], T.abs(y[r, i]))
            fold_column_amax(part, amax, warp, lane, VEC, WARPS, clamp_min)
            for i in T.unroll(VEC):
                if round_sf == 0:  # sf_inv = 448 / amax directly, not 1 / sf (§2.1)
                    inv[i] = T.float32(FMT_MAX) / amax[i]
                    sfv[i] = amax[i] / T.float32(FMT_MAX)
                else:
                    inv[i] = pow2_inverse(round_sf_exponent(amax[i], FMT_MAX))
                    sfv[i] = pow2(round_sf_exponent(amax[i], FMT_MAX))
            if warp == 0 and col_ok:
                for i in T.vectorized(VEC):
                    sf[T.Cast("int64", tb) * hidden + col + i] = sfv[i]

            for grp in group_loop(groups):
                if groups > 1:  # one group is still in registers; more are recomputed (L2 hits)
                    load_group(x, xg, xu, y, a, u, tb, warp, col, col_ok, grp, x_stride, hidden, use_clamp, clamp_value)
                for r in T.unroll(GROUP):
                    lr = warp * rows + grp * GROUP + r  # row inside the token block
                    for i in T.vectorized(VEC):  # saturating cvt: |y * inv| <= 448 up to rounding
                        ql[i] = T.Cast("float8_e4m3fn", y[r, i] * inv[i])
                    if transpose:
                        for i in T.unroll(VEC):
                            tile[(i * 32 + lane) * pitch + lr] = ql[i]
                    elif col_ok:
                        for i in T.vectorized(VEC):
                            out[T.Cast("int64", tb * gm + lr) * hidden + col + i] = ql[i]

            if transpose:
                T.sync_threads()
                for j in T.unroll(COLS * chunks // (32 * WARPS)):
                    k = j * 32 * WARPS + tx
                    c = k // chunks  # column inside the CTA tile
                    piece = k % chunks
                    gcol = bx * COLS + c
                    if gcol < hidden:
                        slot = (c % VEC) * 32 + c // VEC
                        for b in T.unroll(16):
                            run[b] = tile[slot * pitch + piece * 16 + b]
                        for b in T.vectorized(16):
                            out[T.Cast("int64", gcol) * num_tokens + tb * gm + piece * 16 + b] = run[b]
            T.pdl_trigger()

    return per_channel_transpose
