"""E5M6 (v1): per_token_cast_to_e5m6 (direction "encode") and cast_back_e5m6 ("decode").

Numerics are docs/SPEC.md §2.2, mirrored by kernelkiln.torch.quant_extra: one scale per token
over the whole row (fmt_max 65024), code = (fp16_rtz(v) >> 4) plus the RNE carry
(lsb + (fp32_bits & 0x1FFFF) > 0x10000), eight 12-bit codes packed into three uint32 words.

Compile-time: the direction and the plain dtype (encode input / decode output).
Runtime: token count, hidden/8, every stride, the scale storage (fp32 or one UE8M0 byte per
row, row- or column-major: only the token stride differs), round_sf and the amax floor.

encode: one CTA of THREADS threads per row; a thread owns groups of 8 values. Rows of up to
THREADS*MAXC*8 = 8192 values (H = 7168 included) stay in registers between the amax pass and
the encode pass, so the row is read from DRAM once; longer rows re-read their tail. The row
amax is reduced by xor shuffles, then across the CTA's warps through a 4-float shared array.
decode: element-wise; a thread decodes GROUPS_PER_THREAD groups (12-byte loads as three words,
16-byte vector stores of bf16, two of fp32). No shared memory.
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.quant (E5M6): direction and dtype, and each direction's launch-argument names,
# which the build checks against the two PrimFuncs below.
PASS_CONFIGS = THREAD_LEVEL

FMT_MAX = 65024.0
THREADS = 128
WARPS = THREADS // 32
MAXC = 8  # register-cached groups per thread (encode)
GROUPS_PER_THREAD = 2  # decode
SF_FP32, SF_UE8M0 = 0, 1  # runtime scale storage selector


def _code(T, v):
    """12-bit E5M6 code of fp32 ``v`` (uint32): cvt.rz to fp16, drop 4 bits, RNE carry (§2.2)."""
    h16 = T.call_extern("uint16", "__half_as_ushort", T.call_extern("float16", "__float2half_rz", v))
    h = T.shift_right(T.Cast("uint32", h16), T.uint32(4))
    low = T.bitwise_and(T.reinterpret("uint32", v), T.uint32(0x1FFFF))
    return h + T.Cast("uint32", T.bitwise_and(h, T.uint32(1)) + low > T.uint32(0x10000))


def _pack(T, h):
    """Three uint32 words of eight 12-bit codes (docs/SPEC.md §2.2)."""
    def sl(a, n):
        return T.shift_left(a, T.uint32(n))

    def sr(a, n):
        return T.shift_right(a, T.uint32(n))

    w0 = T.bitwise_or(T.bitwise_or(sl(h[0], 20), sl(h[1], 8)), sr(h[2], 4))
    w1 = T.bitwise_or(T.bitwise_or(sl(h[2], 28), sl(h[3], 16)), T.bitwise_or(sl(h[4], 4), sr(h[5], 8)))
    w2 = T.bitwise_or(T.bitwise_or(sl(h[5], 24), sl(h[6], 12)), h[7])
    return w0, w1, w2


def _unpack(T, w):
    """The eight 12-bit codes of three words (inverse of _pack)."""
    def f(a, shift, mask=0xFFF):
        return T.bitwise_and(T.shift_right(a, T.uint32(shift)), T.uint32(mask))

    return [f(w[0], 20), f(w[0], 8), T.bitwise_or(T.shift_left(f(w[0], 0, 0xFF), T.uint32(4)), f(w[1], 28, 0xF)),
            f(w[1], 16), f(w[1], 4), T.bitwise_or(T.shift_left(f(w[1], 0, 0xF), T.uint32(8)), f(w[2], 24, 0xFF)),
            f(w[2], 12), f(w[2], 0)]


def build(p, arch):
    """TileLang PrimFunc for one variant. ``arch`` does not change these kernels."""
    del arch
    if p["direction"] == "encode":
        return _build_encode(p["dtype"])
    return _build_decode(p["dtype"])


def _build_encode(dtype):
    import tilelang.language as T

    from kernels.common.numerics import pow2, pow2_inverse, round_sf_exponent

    f32 = "float32"
    x_numel, out_numel, sf_numel, sfb_numel = T.dynamic("x_numel, out_numel, sf_numel, sfb_numel")

    @T.prim_func
    def e5m6_encode(
        x: T.Tensor((x_numel,), dtype),
        out: T.Tensor((out_numel,), "uint32"),  # the packed uint8 rows, addressed as words
        sf: T.Tensor((sf_numel,), f32),
        sf_bytes: T.Tensor((sfb_numel,), "uint8"),  # packed UE8M0, addressed as bytes
        num_tokens: T.int32,
        groups: T.int32,  # H / 8
        x_stride8: T.int32,  # row stride of x in units of 8 elements (whole groups: provably aligned loads)
        out_stride: T.int32,  # row stride of out in words
        sf_stride: T.int32,  # token stride of sf in elements (bytes for UE8M0)
        sf_mode: T.int32,  # SF_FP32 or SF_UE8M0
        round_sf: T.int32,
        clamp_min: T.float32,
    ):
        with T.Kernel(num_tokens, threads=THREADS) as bx:
            tx = T.get_thread_binding()
            xr = T.alloc_local((MAXC, 8), dtype)
            xt = T.alloc_local((8,), dtype)
            hl = T.alloc_local((8,), "uint32")
            amax = T.alloc_local((1,), f32)
            inv = T.alloc_local((1,), f32)
            red = T.alloc_shared((WARPS,), f32)
            row = T.Cast("int64", bx)
            n_tail = T.ceildiv(T.max(groups - MAXC * THREADS, 0), THREADS)

            T.pdl_sync()
            for c in T.unroll(MAXC):
                k = c * THREADS + tx
                if k < groups:
                    for i in T.vectorized(8):
                        xr[c, i] = x[(row * x_stride8 + k) * 8 + i]
                else:
                    for i in T.unroll(8):
                        xr[c, i] = T.Cast(dtype, 0)
            amax[0] = T.float32(0)
            for c in T.unroll(MAXC):
                for i in T.unroll(8):
                    amax[0] = T.max(amax[0], T.abs(T.Cast(f32, xr[c, i])))
            for c in T.serial(n_tail):  # rows longer than the register cache
                k = (MAXC + c) * THREADS + tx
                if k < groups:
                    for i in T.vectorized(8):
                        xt[i] = x[(row * x_stride8 + k) * 8 + i]
                    for i in T.unroll(8):
                        amax[0] = T.max(amax[0], T.abs(T.Cast(f32, xt[i])))
            for s in T.unroll(5):
                amax[0] = T.max(amax[0], T.shfl_xor(amax[0], T.shift_right(16, s)))
            if tx % 32 == 0:
                red[tx // 32] = amax[0]
            T.sync_threads()
            amax[0] = red[0]
            for w in T.unroll(1, WARPS):
                amax[0] = T.max(amax[0], red[w])
            amax[0] = T.max(amax[0], clamp_min)

            if round_sf != 0:
                e = round_sf_exponent(amax[0], FMT_MAX)
                inv[0] = pow2_inverse(e)
                if tx == 0:
                    if sf_mode == SF_UE8M0:
                        sf_bytes[row * sf_stride] = T.Cast("uint8", e + 127)
                    else:
                        sf[row * sf_stride] = pow2(e)
            else:
                inv[0] = T.float32(FMT_MAX) / amax[0]
                if tx == 0:
                    sf[row * sf_stride] = amax[0] / T.float32(FMT_MAX)

            for c in T.unroll(MAXC):
                k = c * THREADS + tx
                if k < groups:
                    for i in T.unroll(8):
                        hl[i] = _code(T, T.Cast(f32, xr[c, i]) * inv[0])
                    w0, w1, w2 = _pack(T, hl)
                    out[row * out_stride + k * 3] = w0
                    out[row * out_stride + k * 3 + 1] = w1
                    out[row * out_stride + k * 3 + 2] = w2
            for c in T.serial(n_tail):
                k = (MAXC + c) * THREADS + tx
                if k < groups:
                    for i in T.vectorized(8):
                        xt[i] = x[(row * x_stride8 + k) * 8 + i]
                    for i in T.unroll(8):
                        hl[i] = _code(T, T.Cast(f32, xt[i]) * inv[0])
                    w0, w1, w2 = _pack(T, hl)
                    out[row * out_stride + k * 3] = w0
                    out[row * out_stride + k * 3 + 1] = w1
                    out[row * out_stride + k * 3 + 2] = w2
            T.pdl_trigger()

    return e5m6_encode


def _build_decode(dtype):
    import tilelang.language as T

    f32 = "float32"
    gpt = GROUPS_PER_THREAD
    x_numel, out_numel, sf_numel, sfb_numel = T.dynamic("x_numel, out_numel, sf_numel, sfb_numel")

    @T.prim_func
    def e5m6_decode(
        x: T.Tensor((x_numel,), "uint32"),  # packed uint8 rows, addressed as words
        out: T.Tensor((out_numel,), dtype),
        sf: T.Tensor((sf_numel,), f32),
        sf_bytes: T.Tensor((sfb_numel,), "uint8"),
        num_tokens: T.int32,
        groups: T.int32,  # H / 8
        x_stride: T.int32,  # row stride of x in words
        out_stride8: T.int32,  # row stride of out in units of 8 elements
        sf_stride: T.int32,  # token stride of sf in elements (bytes for UE8M0)
        sf_mode: T.int32,
    ):
        with T.Kernel(num_tokens, T.ceildiv(groups, THREADS * gpt), threads=THREADS) as (bx, by):
            tx = T.get_thread_binding()
            xw = T.alloc_local((gpt, 3), "uint32")
            ol = T.alloc_local((8,), dtype)
            hd = T.alloc_local((8,), "uint32")
            s = T.alloc_local((1,), f32)
            row = T.Cast("int64", bx)

            T.pdl_sync()
            for c in T.unroll(gpt):
                k = (by * gpt + c) * THREADS + tx
                if k < groups:
                    for j in T.unroll(3):
                        xw[c, j] = x[row * x_stride + k * 3 + j]
            s[0] = T.if_then_else(sf_mode == SF_UE8M0,
                                  T.reinterpret(f32, T.shift_left(T.Cast("uint32", sf_bytes[row * sf_stride]),
                                                                  T.uint32(23))),
                                  sf[row * sf_stride])
            for c in T.unroll(gpt):
                k = (by * gpt + c) * THREADS + tx
                if k < groups:
                    for i, code in enumerate(_unpack(T, [xw[c, 0], xw[c, 1], xw[c, 2]])):
                        hd[i] = code
                    for i in T.unroll(8):
                        v = T.call_extern(f32, "__half2float", T.call_extern(
                            "float16", "__ushort_as_half", T.Cast("uint16", T.shift_left(hd[i], T.uint32(4)))))
                        ol[i] = T.Cast(dtype, v * s[0])
                    for i in T.vectorized(8):
                        out[(row * out_stride8 + k) * 8 + i] = ol[i]
            T.pdl_trigger()

    return e5m6_decode
