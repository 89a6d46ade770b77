"""mhc_pre_apply_mix_fwd: the layer input as the mix-weighted sum of the m streams (spec: the contract's doc,
kernelkiln_contract.mhc_streams).

Thread level, because the bits are the order of one product and m-1 fmas, written out with __fmul_rn/__fmaf_rn
(nvcc's contraction would otherwise decide it): one thread per (token, group of VEC columns), the token's m mix
weights (scalar loads, shared by the CTA's threads through L1) and m 16-byte loads of the streams.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_streams import STREAM_THREADS as THREADS
from kernelkiln_contract.mhc_streams import STREAM_VEC as VEC

# Declared in kernelkiln_contract.mhc_streams (MHC_PRE_APPLY_MIX_FWD): mhc_mult, and the launch-argument names
# below, which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    x_n, w_n, o_n = T.dynamic("x_n, w_n, o_n")

    def fma(a, b, c):
        return T.call_extern("float32", "__fmaf_rn", a, b, c)

    def fmul(a, b):
        return T.call_extern("float32", "__fmul_rn", a, b)

    @T.prim_func
    def mhc_pre_apply_mix_fwd(
        x: T.Tensor((x_n,), "bfloat16"),  # [n, m, H]
        mix: T.Tensor((w_n,), "float32"),  # [n, m]
        o: T.Tensor((o_n,), "bfloat16"),  # [n, H]
        num_vecs: T.int32,  # n·H / VEC
        hidden_vecs: T.int32,  # H / VEC
    ):
        with T.Kernel(T.ceildiv(num_vecs, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            xv = T.alloc_local((m * VEC,), "bfloat16")
            w = T.alloc_local((m,), "float32")
            acc = T.alloc_local((VEC,), "float32")
            out = T.alloc_local((VEC,), "bfloat16")
            item = bx * THREADS + tx  # int32: the host keeps n·H/VEC + THREADS below 2**31
            T.pdl_sync()
            if item < num_vecs:
                t = T.Cast("int64", T.truncdiv(item, hidden_vecs))
                c = T.Cast("int64", T.truncmod(item, hidden_vecs))
                for s in T.unroll(m):
                    w[s] = mix[t * m + s]
                for s in T.unroll(m):
                    for j in T.vectorized(VEC):
                        xv[s * VEC + j] = x[((t * m + s) * hidden_vecs + c) * VEC + j]
                for j in T.unroll(VEC):
                    acc[j] = fmul(w[0], T.Cast("float32", xv[j]))
                for s in T.unroll(1, m):
                    for j in T.unroll(VEC):
                        acc[j] = fma(w[s], T.Cast("float32", xv[s * VEC + j]), acc[j])
                for j in T.unroll(VEC):
                    out[j] = T.Cast("bfloat16", acc[j])
                for j in T.vectorized(VEC):
                    o[T.Cast("int64", item) * VEC + j] = out[j]
            T.pdl_trigger()

    return mhc_pre_apply_mix_fwd
