"""mhc_head_compute_mix_fwd: the head mix ``sigmoid(fma(x, s, b)) + eps`` (spec: the contract's doc,
kernelkiln_contract.mhc_mixes).

One thread per token row of m values (a vector load and store of the row), 128 tokens per CTA. Thread level
because every rounding step is pinned with the IEEE intrinsics (the fused big-fuse kernel must reproduce them).
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_mixes import MIX_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_mixes (MHC_HEAD_COMPUTE_MIX_FWD): mhc_mult, and the launch-argument names
# below, which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    f32 = "float32"
    n_mix = T.dynamic("n_mix")

    def fma(a, b, c):
        return T.call_extern(f32, "__fmaf_rn", a, b, c)

    def add(a, b):
        return T.call_extern(f32, "__fadd_rn", a, b)

    def sigmoid(z):  # TVM's legalization of T.sigmoid, with the division and the sum pinned
        return T.call_extern(f32, "__fdiv_rn", T.float32(1), add(T.float32(1), T.exp(-z)))

    @T.prim_func
    def mhc_head_compute_mix_fwd(
        input_mix: T.Tensor((n_mix,), f32),  # [n, m]
        mhc_scale: T.Tensor((1,), f32),
        mhc_base: T.Tensor((m,), f32),
        output_mix: T.Tensor((n_mix,), f32),  # [n, m]
        mhc_pre_eps: T.float32,
        num_tokens: T.int32,
    ):
        with T.Kernel(T.ceildiv(num_tokens, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            a = T.alloc_local((m,), f32)
            b = T.alloc_local((m,), f32)
            o = T.alloc_local((m,), f32)
            T.pdl_sync()
            t = bx * THREADS + tx
            if t < num_tokens:
                row = T.Cast("int64", t) * m
                s = mhc_scale[0]
                for j in T.vectorized(m):
                    a[j] = input_mix[row + j]
                for j in T.vectorized(m):
                    b[j] = mhc_base[j]
                for j in T.unroll(m):
                    o[j] = add(sigmoid(fma(a[j], s, b[j])), mhc_pre_eps)
                for j in T.vectorized(m):
                    output_mix[row + j] = o[j]
            T.pdl_trigger()

    return mhc_head_compute_mix_fwd
