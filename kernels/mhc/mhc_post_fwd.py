"""mhc_post_fwd: the m new residual streams from the layer output and the old streams (spec: the contract's doc,
kernelkiln_contract.mhc_streams).

Thread level, because the bits are the order of one product and m fmas per output (comb[0]·r_0 rounded, then
fma(c, x, ·), then the other streams), written out with
__fmul_rn/__fmaf_rn: one thread per (token, group of VEC columns) loads x's and the m streams' 16-byte vectors once
and writes all m outputs; the token's m post weights and m·m comb weights are scalar loads shared by the CTA's
threads through L1.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_streams import STREAM_THREADS as THREADS
from kernelkiln_contract.mhc_streams import STREAM_VEC as VEC

# Declared in kernelkiln_contract.mhc_streams (MHC_POST_FWD): mhc_mult, and the launch-argument names below, which
# the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    x_n, r_n, p_n, c_n = T.dynamic("x_n, r_n, p_n, c_n")

    def fma(a, b, c):
        return T.call_extern("float32", "__fmaf_rn", a, b, c)

    def fmul(a, b):
        return T.call_extern("float32", "__fmul_rn", a, b)

    @T.prim_func
    def mhc_post_fwd(
        x: T.Tensor((x_n,), "bfloat16"),  # [n, H]
        residual: T.Tensor((r_n,), "bfloat16"),  # [n, m, H]
        post_layer_mix: T.Tensor((p_n,), "float32"),  # [n, m]
        comb_res_mix: T.Tensor((c_n,), "float32"),  # [n, m, m]
        out: T.Tensor((r_n,), "bfloat16"),  # [n, m, H]
        num_vecs: T.int32,  # n·H / VEC
        hidden_vecs: T.int32,  # H / VEC
    ):
        with T.Kernel(T.ceildiv(num_vecs, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            xv = T.alloc_local((VEC,), "bfloat16")
            rv = T.alloc_local((m * VEC,), "bfloat16")
            pw = T.alloc_local((m,), "float32")
            cw = T.alloc_local((m * m,), "float32")
            acc = T.alloc_local((1,), "float32")
            ov = T.alloc_local((VEC,), "bfloat16")
            item = bx * THREADS + tx  # int32: the host keeps n·H/VEC + THREADS below 2**31
            T.pdl_sync()
            if item < num_vecs:
                t = T.Cast("int64", T.truncdiv(item, hidden_vecs))
                c = T.Cast("int64", T.truncmod(item, hidden_vecs))
                for s in T.unroll(m):
                    pw[s] = post_layer_mix[t * m + s]
                for s in T.unroll(m * m):
                    cw[s] = comb_res_mix[t * (m * m) + s]
                for j in T.vectorized(VEC):
                    xv[j] = x[T.Cast("int64", item) * VEC + j]
                for s in T.unroll(m):
                    for j in T.vectorized(VEC):
                        rv[s * VEC + j] = residual[((t * m + s) * hidden_vecs + c) * VEC + j]
                for o in T.unroll(m):
                    for j in T.unroll(VEC):
                        # the peer's contraction of c·x + comb[0]·r_0: the stream-0 product rounded, c·x fused
                        acc[0] = fmul(cw[o], T.Cast("float32", rv[j]))
                        acc[0] = fma(pw[o], T.Cast("float32", xv[j]), acc[0])
                        for i in T.unroll(1, m):
                            acc[0] = fma(cw[i * m + o], T.Cast("float32", rv[i * VEC + j]), acc[0])
                        ov[j] = T.Cast("bfloat16", acc[0])
                    for j in T.vectorized(VEC):
                        out[((t * m + o) * hidden_vecs + c) * VEC + j] = ov[j]
            T.pdl_trigger()

    return mhc_post_fwd
