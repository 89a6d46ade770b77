"""expand_to_mhc_bwd: the streams' gradients summed back into the hidden state's (spec: the contract's doc,
kernelkiln_contract.mhc_streams).

Thread level: one thread per (token, group of VEC columns); the m stream rows are added in stream order from +0
with explicit round-to-nearest additions (no reassociation), then one rounding to bf16.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_streams import STREAM_THREADS as THREADS
from kernelkiln_contract.mhc_streams import STREAM_VEC as VEC

# Declared in kernelkiln_contract.mhc_streams (EXPAND_TO_MHC_BWD): mhc_mult, and the launch-argument names below,
# which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    g_n, x_n = T.dynamic("g_n, x_n")

    def fadd(a, b):
        return T.call_extern("float32", "__fadd_rn", a, b)

    @T.prim_func
    def expand_to_mhc_bwd(
        o_grad: T.Tensor((g_n,), "bfloat16"),  # [n, m, H]
        x_grad: T.Tensor((x_n,), "bfloat16"),  # [n, H]
        num_vecs: T.int32,  # n·H / VEC
        hidden_vecs: T.int32,  # H / VEC
    ):
        with T.Kernel(T.ceildiv(num_vecs, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            g = T.alloc_local((m * VEC,), "bfloat16")
            acc = T.alloc_local((VEC,), "float32")
            out = T.alloc_local((VEC,), "bfloat16")
            item = bx * THREADS + tx  # int32: the host keeps n·H/VEC + THREADS below 2**31
            T.pdl_sync()
            if item < num_vecs:
                t = T.Cast("int64", T.truncdiv(item, hidden_vecs))
                c = T.Cast("int64", T.truncmod(item, hidden_vecs))
                for s in T.unroll(m):  # all loads first: m in flight
                    for j in T.vectorized(VEC):
                        g[s * VEC + j] = o_grad[((t * m + s) * hidden_vecs + c) * VEC + j]
                for j in T.unroll(VEC):
                    acc[j] = T.float32(0)
                for s in T.unroll(m):
                    for j in T.unroll(VEC):
                        acc[j] = fadd(acc[j], T.Cast("float32", g[s * VEC + j]))
                for j in T.unroll(VEC):
                    out[j] = T.Cast("bfloat16", acc[j])
                for j in T.vectorized(VEC):
                    x_grad[T.Cast("int64", item) * VEC + j] = out[j]
            T.pdl_trigger()

    return expand_to_mhc_bwd
