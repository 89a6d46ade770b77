"""fused_weight: the gate's fp32 weight, the exact product of the two bf16 weights (spec: the contract's doc).

A CTA takes 256 elements of the flattened [hc, H] tensors (H is a multiple of 256, so there is no partial tile),
each of its 32 threads 8 contiguous ones: a 16-byte load from each weight and two 16-byte stores. Thread level:
a tile copy (T.copy) of a runtime-sized buffer gets per-element bounds guards, which split it into scalar loads.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401

# Declared in kernelkiln_contract.engram (FUSED_WEIGHT): weight_dtype, and the launch-argument names below, which
# the build checks against this PrimFunc.
VEC = 8
THREADS = 32


def build(p, arch):
    import tilelang.language as T

    del arch
    dt = p["weight_dtype"]
    numel_t = T.dynamic("numel_t")

    @T.prim_func
    def fused_weight(
        weight_hidden: T.Tensor((numel_t,), dt),
        weight_embed: T.Tensor((numel_t,), dt),
        out: T.Tensor((numel_t,), "float32"),
        numel: T.int32,  # hc·H, a multiple of THREADS·VEC
    ):
        with T.Kernel(T.ceildiv(numel, THREADS * VEC), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            a = T.alloc_local((VEC,), dt)
            b = T.alloc_local((VEC,), dt)
            c = T.alloc_local((VEC,), "float32")
            base = T.Cast("int64", bx * THREADS + tx) * VEC
            T.pdl_sync()
            for j in T.vectorized(VEC):
                a[j] = weight_hidden[base + j]
            for j in T.vectorized(VEC):
                b[j] = weight_embed[base + j]
            for j in T.unroll(VEC):
                c[j] = T.Cast("float32", a[j]) * T.Cast("float32", b[j])
            for j in T.vectorized(VEC):
                out[base + j] = c[j]
            T.pdl_trigger()

    return fused_weight
