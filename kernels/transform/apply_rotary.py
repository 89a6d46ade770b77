"""apply_rotary: rotary position embedding, in place on one [B, S, heads, D] tensor (docs/SPEC.md §3.10).

Each pair (a, b) of a head (NeoX: (i, i + D/2); interleaved: (2i, 2i + 1)) is rotated by the angle of its token's
position with the cache's cos and sin (row pos of the fp32 cache [seqlen_ro, D]: cos in [:D/2], sin in [D/2:]):
a' = fma(a, cos, -(b * s)), b' = fma(a, s, b * cos), products and fma in fp32 and one rounding to the tensor's dtype.
s = sin * sin_sign with sin_sign = +1 or -1 (conjugate): negating sin is exact, so the conjugate rotation
a' = fma(a, cos, b * sin), b' = fma(a, -sin, b * cos) is the same code with a runtime sign, and so is the choice
between given positions (pos = positions[b, s] + seqlen_offset, int32 arithmetic as the peer's; int64 positions are
truncated) and implicit ones (pos = s + seqlen_offset): neither needs a second cubin.

Thread mapping (thread level: each item gathers its own cache row, which a tile copy cannot express): a CTA takes
tokens_per_cta tokens of one batch row (grid x = token blocks, y = batch); its threads stride over
(token, head, group of VEC = 4 pairs), loading the group's a and b values with vector loads (strides come in units
of VEC elements, so the loads are provably aligned) and the group's four cos and four sin values.

Compile-time: dtype, head dim and the pair layout, and the positions' dtype. Runtime: batch, sequence length, heads,
every stride, tokens per CTA, the offset, the sign and whether positions are given.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401

# Declared in kernelkiln_contract.transform (APPLY_ROTARY): dtype, head_dim, interleaved and positions_dtype, and
# the launch-argument names below, which the build checks against this PrimFunc.
THREADS = 128
VEC = 4  # pairs per item


def build(p, arch):
    import tilelang.language as T

    del arch
    dt, d, interleaved, pdt = p["dtype"], p["head_dim"], bool(p["interleaved"]), p["positions_dtype"]
    half = d // 2
    groups = half // VEC  # items per (token, head)
    x_numel, c_numel, p_numel = T.dynamic("x_numel, c_numel, p_numel")

    @T.prim_func
    def apply_rotary(
        x: T.Tensor((x_numel,), dt),  # [B, S, heads, D], inner stride 1; rotated in place
        cos_sin: T.Tensor((c_numel,), "float32"),  # [seqlen_ro, D], inner stride 1
        positions: T.Tensor((p_numel,), pdt),  # [B, S] (batch stride may be 0); unused without positions
        batch: T.int32,
        seqlen: T.int32,
        heads: T.int32,
        x_stride_b: T.int64,  # strides of x in units of VEC elements
        x_stride_s: T.int64,
        x_stride_h: T.int32,
        cache_stride: T.int32,  # row stride of the cache in units of VEC floats
        positions_stride_b: T.int64,
        has_positions: T.int32,
        seqlen_offset: T.int32,
        sin_sign: T.float32,  # +1, or -1 for the conjugate rotation
        tokens_per_cta: T.int32,
    ):
        with T.Kernel(T.ceildiv(seqlen, tokens_per_cta), batch, threads=THREADS) as (bx, by):
            tx = T.get_thread_binding()
            xa = T.alloc_local((VEC,), dt)
            xb = T.alloc_local((VEC,), dt)
            xp = T.alloc_local((2 * VEC,), dt)  # interleaved: a0 b0 a1 b1 ...
            cs = T.alloc_local((VEC,), "float32")
            sn = T.alloc_local((VEC,), "float32")
            ra = T.alloc_local((VEC,), "float32")
            rb = T.alloc_local((VEC,), "float32")
            pos = T.alloc_var("int32")
            per_token = heads * groups
            T.pdl_sync()
            for k in T.serial(T.ceildiv(tokens_per_cta * per_token, THREADS)):
                w = k * THREADS + tx
                t = bx * tokens_per_cta + T.truncdiv(w, per_token)
                if w < tokens_per_cta * per_token and t < seqlen:
                    r = T.truncmod(w, per_token)
                    h = T.truncdiv(r, groups)
                    g = T.truncmod(r, groups)
                    pos = t + seqlen_offset
                    if has_positions != 0:
                        pos = T.Cast("int32", positions[T.Cast("int64", by) * positions_stride_b + t]) + seqlen_offset
                    row = T.Cast("int64", pos) * cache_stride  # in units of VEC floats
                    for j in T.vectorized(VEC):
                        cs[j] = cos_sin[(row + g) * VEC + j]
                    for j in T.vectorized(VEC):
                        sn[j] = cos_sin[(row + groups + g) * VEC + j]
                    base = T.Cast("int64", by) * x_stride_b + T.Cast("int64", t) * x_stride_s + T.Cast(
                        "int64", h) * x_stride_h  # in units of VEC elements
                    if interleaved:
                        for j in T.vectorized(2 * VEC):
                            xp[j] = x[(base + 2 * g) * VEC + j]
                        for j in T.unroll(VEC):
                            xa[j] = xp[2 * j]
                            xb[j] = xp[2 * j + 1]
                    else:
                        for j in T.vectorized(VEC):
                            xa[j] = x[(base + g) * VEC + j]
                        for j in T.vectorized(VEC):
                            xb[j] = x[(base + groups + g) * VEC + j]
                    for j in T.unroll(VEC):
                        a = T.Cast("float32", xa[j])
                        b = T.Cast("float32", xb[j])
                        s = sn[j] * sin_sign  # exact: sin_sign is +-1
                        ra[j] = T.call_extern("float32", "__fmaf_rn", a, cs[j],
                                              -T.call_extern("float32", "__fmul_rn", b, s))
                        rb[j] = T.call_extern("float32", "__fmaf_rn", a, s,
                                              T.call_extern("float32", "__fmul_rn", b, cs[j]))
                    if interleaved:
                        for j in T.unroll(VEC):
                            xp[2 * j] = T.Cast(dt, ra[j])
                            xp[2 * j + 1] = T.Cast(dt, rb[j])
                        for j in T.vectorized(2 * VEC):
                            x[(base + 2 * g) * VEC + j] = xp[j]
                    else:
                        for j in T.unroll(VEC):
                            xa[j] = T.Cast(dt, ra[j])
                            xb[j] = T.Cast(dt, rb[j])
                        for j in T.vectorized(VEC):
                            x[(base + g) * VEC + j] = xa[j]
                        for j in T.vectorized(VEC):
                            x[(base + groups + g) * VEC + j] = xb[j]
            T.pdl_trigger()

    return apply_rotary
