"""cast: element-wise dtype conversion of a flat buffer, optionally with deterministic
stochastic rounding (docs/SPEC.md §3.2 ``quant.cast``, §2.2).

Compile-time: the (in_dtype, out_dtype) pair and stochastic_rounding. Runtime:
the element count n of this launch and the quad index of its first quad
(the host splits tensors over 2**30 elements into launches of 2**30, so all
in-kernel indices fit int32).

Thread mapping: each thread owns UNROLL chunks of 16 input bytes (4 fp32, 8 bf16
or 16 e4m3 elements); chunk u of thread t in CTA b is (b*UNROLL + u)*THREADS + t,
so every warp load/store is one contiguous run. All loads are issued before any
conversion (UNROLL x 16 bytes in flight per thread). A chunk that is not fully
inside n takes a per-element (RNE) or per-quad (stochastic) guarded path.

Numerics (bit-exact with ``kernelkiln.torch.stochastic.cast_dtype``):
  * stochastic: ``kernels/common/stochastic.py`` on every arch.
  * RNE fp32/e4m3 -> bf16 is integer RNE on the fp32 bits (canonical NaN 0x7FFF,
    overflow -> inf); -> e4m3 is the saturating cvt (inf -> 448) with NaN -> 0x7F;
    bf16 -> fp32 widens the bits exactly (NaN payload kept); e4m3 -> fp32 gives
    the canonical NaN 0x7FFFFFFF.
No shared memory, no block barrier.
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.quant (CAST): the dtype pairs each rounding mode converts, and the launch-argument
# names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL

THREADS = 256
UNROLL = 4
IN_BYTES = {"float32": 4, "bfloat16": 2, "float8_e4m3fn": 1}
MAX_ELEMENTS_PER_LAUNCH = 1 << 30


def elems_per_chunk(in_dtype):
    """Elements per 16-byte input chunk (per thread and unroll step)."""
    return 16 // IN_BYTES[in_dtype]


def elems_per_cta(in_dtype):
    return THREADS * UNROLL * elems_per_chunk(in_dtype)


def _storage(out_dtype, stochastic):
    """Output buffer element type: stochastic results are packed words; bf16 is built as uint16 bits."""
    if stochastic:
        return "uint32"
    return {"bfloat16": "uint16", "float32": "float32", "float8_e4m3fn": "float8_e4m3fn"}[out_dtype]


def build(p, arch):
    """TileLang PrimFunc for one variant. ``arch`` does not change this kernel."""
    import tilelang.language as T

    # (a ``kernels.common.<module>`` import: build_tools/cache.py keys the lowering on it)
    from kernels.common.stochastic import quad_random_bits, to_bf16x2_stochastic, to_e4m3x4_stochastic

    del arch
    in_dtype, out_dtype, stochastic = p["in_dtype"], p["out_dtype"], bool(p["stochastic_rounding"])
    vec = elems_per_chunk(in_dtype)
    per_cta = elems_per_cta(in_dtype)
    out_storage = _storage(out_dtype, stochastic)
    out_bytes = {"bfloat16": 2, "float32": 4, "float8_e4m3fn": 1}[out_dtype]
    stores = max(1, vec * out_bytes // 16)  # 16-byte stores per chunk (RNE path)
    quads = vec // 4
    # Output words per quad (stochastic): one e4m3x4 word, or two bf16x2 words.
    wpq = 1 if out_dtype == "float8_e4m3fn" else 2
    x_numel, out_numel = T.dynamic("x_numel, out_numel")

    def bits32(xr, u, i):
        """uint32 fp32 bits of input element (u, i): fp32 raw, bf16 widened exactly by a shift."""
        if in_dtype == "bfloat16":
            return T.shift_left(T.Cast("uint32", T.reinterpret("uint16", xr[u, i])), T.uint32(16))
        return T.reinterpret("uint32", xr[u, i])

    def value32(xr, u, i):
        """Input element as fp32 (e4m3: exact widening; NaN is handled by the caller)."""
        if in_dtype == "float32":
            return xr[u, i]
        if in_dtype == "bfloat16":
            return T.reinterpret("float32", bits32(xr, u, i))
        return T.Cast("float32", xr[u, i])

    def is_nan(b):
        """NaN test on fp32 bits (TVM folds ``v != v`` to false, so never test floats for NaN)."""
        return T.reinterpret("int32", T.bitwise_and(b, T.uint32(0x7FFFFFFF))) > T.int32(0x7F800000)

    def rne(xr, u, i):
        """One RNE-converted element in the output storage type."""
        if in_dtype == "bfloat16" and out_dtype == "float32":  # exact bit widening, NaN payload kept
            return T.reinterpret("float32", bits32(xr, u, i))
        v = value32(xr, u, i)
        b = T.reinterpret("uint32", v)
        if out_dtype == "float8_e4m3fn":  # saturating cvt (inf -> 448); NaN pinned to 0x7F
            return T.if_then_else(is_nan(b), T.reinterpret("float8_e4m3fn", T.uint8(0x7F)),
                                  T.Cast("float8_e4m3fn", v))
        if out_dtype == "float32":  # from e4m3: exact, canonical NaN
            return T.if_then_else(is_nan(b), T.reinterpret("float32", T.uint32(0x7FFFFFFF)), v)
        # -> bf16, integer round-to-nearest-even on the fp32 bits (inf stays inf, overflow -> inf).
        rounded = T.shift_right(b + T.uint32(0x7FFF) + T.bitwise_and(T.shift_right(b, T.uint32(16)), T.uint32(1)),
                                T.uint32(16))
        return T.Cast("uint16", T.if_then_else(is_nan(b), T.uint32(0x7FFF), rounded))

    def sr_words(b, rw):
        """The wpq output words of one quad from its fp32 bits ``b[0:4]`` and random words ``rw``."""
        if out_dtype == "float8_e4m3fn":
            return [to_e4m3x4_stochastic(b[0], b[1], b[2], b[3], rw[0])]
        return [to_bf16x2_stochastic(b[0], b[1], rw[0]), to_bf16x2_stochastic(b[2], b[3], rw[1])]

    @T.prim_func
    def cast(
        x: T.Tensor((x_numel,), in_dtype),
        out: T.Tensor((out_numel,), out_storage),
        n: T.int32,  # elements in this launch (a multiple of 4 when stochastic)
        quad_base: T.int32,  # global quad index of this launch's first element (mod 2**32)
    ):
        with T.Kernel(T.ceildiv(n, per_cta), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            xr = T.alloc_local((UNROLL, vec), in_dtype)
            ow = T.alloc_local((quads * wpq,), "uint32")
            bq = T.alloc_local((4,), "uint32")  # one quad's fp32 bits
            rw = T.alloc_local((2,), "uint32")  # its random words (kept in registers, computed once)
            oe = T.alloc_local((vec,), out_storage)

            T.pdl_sync()
            for u in T.unroll(UNROLL):
                base = ((bx * UNROLL + u) * THREADS + tx) * vec
                if base + vec <= n:
                    for i in T.vectorized(vec):
                        xr[u, i] = x[base + i]
                else:
                    for i in T.unroll(vec):
                        xr[u, i] = T.Cast(in_dtype, 0)
                        if base + i < n:
                            xr[u, i] = x[base + i]

            for u in T.unroll(UNROLL):
                base = ((bx * UNROLL + u) * THREADS + tx) * vec
                if stochastic:
                    q0 = T.Cast("uint32", quad_base) + T.Cast("uint32", base // 4)
                    for j in T.unroll(quads):
                        for i in T.unroll(4):
                            bq[i] = bits32(xr, u, 4 * j + i)
                        r0, r1 = quad_random_bits(bq[0], bq[1], bq[2], bq[3], q0 + T.Cast("uint32", j))
                        rw[0] = r0
                        rw[1] = r1
                        words = sr_words(bq, rw)
                        ow[j * wpq] = words[0]
                        if wpq == 2:
                            ow[j * wpq + 1] = words[1]
                    if base + vec <= n:
                        for w in T.vectorized(quads * wpq):
                            out[(base // 4) * wpq + w] = ow[w]
                    else:
                        for w in T.unroll(quads * wpq):
                            if base + (w // wpq) * 4 < n:
                                out[(base // 4) * wpq + w] = ow[w]
                else:
                    for i in T.unroll(vec):
                        oe[i] = rne(xr, u, i)
                    if base + vec <= n:
                        for k in T.unroll(stores):  # at most 16 bytes per store (no 32-byte uint16 vectors)
                            for i in T.vectorized(vec // stores):
                                out[base + k * (vec // stores) + i] = oe[k * (vec // stores) + i]
                    else:
                        for i in T.unroll(vec):
                            if base + i < n:
                                out[base + i] = oe[i]
            T.pdl_trigger()

    return cast
