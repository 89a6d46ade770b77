"""CUDA helper source that kernels inject with T.import_source.

Injected code lands in the lowered file's preamble, before TileLang's (guarded) includes. Several
variants of one op are compiled as one translation unit (build_tools/units.py), each with its own
preamble, so a helper must be defined once however often it appears: ``guarded`` wraps it in an
include guard. Only the preprocessor sees the guard; the compiled code is the same.
"""


def guarded(name, source):
    macro = f"TK_HELPER_{name.upper()}"
    return f"\n#ifndef {macro}\n#define {macro}\n{source.strip()}\n#endif\n"


# One 16-byte global store of four 32-bit words held in registers. nvcc splits TileLang's
# `*(uint4*)(dst) = *(uint4*)(local_array)` into four 4-byte stores when the local array is one of
# 32-bit words (seen in the SASS of the bf16 / fp32 transposes; byte arrays kept STG.128).
STORE_16B_SOURCE = guarded("store_16b", """
__device__ __forceinline__ int tk_store_16b(void* p, unsigned a, unsigned b, unsigned c, unsigned d) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" : : "l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
    return 0;
}
""")


def store_16b(T, dst, words):
    """Emit one STG.128 of four 32-bit words at ``dst`` (a buffer element, 16-byte aligned); the kernel
    imports STORE_16B_SOURCE. ``T`` is tilelang.language (this module stays importable without it)."""
    T.evaluate(T.call_extern("int32", "tk_store_16b", T.address_of(dst), *words))


# max |x| of 8 consecutive bf16 values held in registers, as fp32. Packed bf16x2 ops: the absolute values
# come from HFMA2 (FMA pipe) and the maxima from one HMNMX2 and one three-way VHMNMX, where eight fp32
# FMNMX would occupy the half-rate ALU pipe (the issue-bound FP4 casts feel it). Exact: max only selects, and bf16
# widens to fp32 exactly. NaN is skipped as fmaxf skips it (__hmax2 returns the non-NaN operand); a
# row of NaN gives NaN, which the caller's max with its amax floor turns into the floor, as before.
ABSMAX8_BF16_SOURCE = guarded("absmax8_bf16", """
#include <cuda_bf16.h>
__device__ __forceinline__ float tk_absmax8_bf16(const void* p) {
    const __nv_bfloat162* v = (const __nv_bfloat162*)p;
    __nv_bfloat162 m = __hmax2(__hmax2(__habs2(v[0]), __habs2(v[1])), __hmax2(__habs2(v[2]), __habs2(v[3])));
    return fmaxf(__low2float(m), __high2float(m));
}
""")


# The same maxima kept packed: the bf16x2 bits of (max |x| over the even elements, over the odd ones), and the
# packed maximum of two such words (for reducing two rows per register; __hmax2 skips NaN like fmaxf).
BF16X2_MAX_SOURCE = guarded("bf16x2_max", """
#include <cuda_bf16.h>
__device__ __forceinline__ unsigned tk_absmax8_bf16x2(const void* p) {
    const __nv_bfloat162* v = (const __nv_bfloat162*)p;
    __nv_bfloat162 m = __hmax2(__hmax2(__habs2(v[0]), __habs2(v[1])), __hmax2(__habs2(v[2]), __habs2(v[3])));
    return *(const unsigned*)&m;
}
__device__ __forceinline__ unsigned tk_hmax2_bf16(unsigned a, unsigned b) {
    __nv_bfloat162 m = __hmax2(*(const __nv_bfloat162*)&a, *(const __nv_bfloat162*)&b);
    return *(const unsigned*)&m;
}
""")


def absmax8_bf16(T, first):
    """max |x| over the 8 bf16 registers starting at ``first`` (a 16-byte aligned local element); the kernel
    imports ABSMAX8_BF16_SOURCE."""
    return T.call_extern("float32", "tk_absmax8_bf16", T.address_of(first))


# PTX prmt with the full 4-bit byte selector. CUDA's __byte_perm reads only the low 3 bits of each selector nibble;
# PTX's fourth bit replicates the selected byte's sign bit over the whole result byte, which the FP4 packing uses to
# gather sign bits without shifts (kernels/common/numerics.e2m1_pack).
PRMT_SOURCE = guarded("prmt", """
__device__ __forceinline__ unsigned tk_prmt(unsigned a, unsigned b, unsigned selector) {
    unsigned d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
}
""")

# Two bf16 registers (4-byte aligned local elements) read as one 32-bit word, for bit-level work on them.
U32_AT_SOURCE = guarded("u32_at", """
__device__ __forceinline__ unsigned tk_u32_at(const void* p) {
    return *(const unsigned*)p;
}
""")


def bf16_values(T, pair_firsts):
    """fp32 values of bf16 registers read in pairs: each pair given by its first (4-byte aligned) local
    element, the pair's low half first; the kernel imports U32_AT_SOURCE. Exact: bf16 is the top half of an
    fp32. The low element shifts up (IMAD.U32, on the FMA pipe) and the high one is masked (one LOP3), where
    TileLang's element-wise cast moves the high half down and back up (PRMT + IMAD.U32)."""
    out = []
    for first in pair_firsts:
        word = T.call_extern("uint32", "tk_u32_at", T.address_of(first))
        out += [T.reinterpret("float32", T.shift_left(word, T.uint32(16))),
                T.reinterpret("float32", T.bitwise_and(word, T.uint32(0xFFFF0000)))]
    return out
