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
