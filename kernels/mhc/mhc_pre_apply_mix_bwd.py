"""mhc_pre_apply_mix_bwd: the streams' gradient accumulated in place and the mix gradient (spec: the contract's
doc, kernelkiln_contract.mhc_streams).

Thread level, because the mix gradient's bits are the order of its reduction over H: one CTA per token; thread t
walks the column groups k·THREADS + t, and per group loads o_grad's vector and, per stream, x's and x_grad's,
accumulates ``fma(og, x, acc_s)`` column by column and writes ``bf16(fma(mix_s, og, x_grad))`` back. The m partials
are then reduced over all THREADS threads by the xor butterfly of TileLang's ``tl::AllReduce`` (offsets 64 and 32
through shared memory, then 16 .. 1 by shuffles): the peer's kernel lowers its reducer to exactly this, with the
same per-thread layout when H is a multiple of THREADS·VEC = 1024 (its block is gcd(1024, H) columns).
"""
from kernels.common.butterfly import block_allreduce
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_streams import STREAM_THREADS as THREADS
from kernelkiln_contract.mhc_streams import STREAM_VEC as VEC

# Declared in kernelkiln_contract.mhc_streams (MHC_PRE_APPLY_MIX_BWD): mhc_mult, and the launch-argument names
# below, which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    g_n, x_n, w_n = T.dynamic("g_n, x_n, w_n")

    def fma(a, b, c):
        return T.call_extern("float32", "__fmaf_rn", a, b, c)

    def fadd(a, b):
        return T.call_extern("float32", "__fadd_rn", a, b)

    allreduce = block_allreduce(T, THREADS, m, fadd)

    @T.prim_func
    def mhc_pre_apply_mix_bwd(
        o_grad: T.Tensor((g_n,), "bfloat16"),  # [n, H]
        x: T.Tensor((x_n,), "bfloat16"),  # [n, m, H]
        mix: T.Tensor((w_n,), "float32"),  # [n, m]
        x_grad: T.Tensor((x_n,), "bfloat16"),  # [n, m, H], accumulated in place
        mix_grad: T.Tensor((w_n,), "float32"),  # [n, m]
        num_tokens: T.int32,
        hidden_vecs: T.int32,  # H / VEC
    ):
        with T.Kernel(num_tokens, threads=THREADS) as bx:
            tx = T.get_thread_binding()
            og = T.alloc_local((VEC,), "bfloat16")
            xv = T.alloc_local((m * VEC,), "bfloat16")
            gv = T.alloc_local((m * VEC,), "bfloat16")
            w = T.alloc_local((m,), "float32")
            acc = T.alloc_local((m,), "float32")
            red = T.alloc_shared((m * THREADS,), "float32")
            t = T.Cast("int64", bx)
            T.pdl_sync()
            for s in T.unroll(m):
                w[s] = mix[t * m + s]
                acc[s] = T.float32(0)
            for k in T.serial(T.ceildiv(hidden_vecs, THREADS)):
                c = T.Cast("int64", k * THREADS + tx)
                if c < hidden_vecs:
                    for j in T.vectorized(VEC):
                        og[j] = o_grad[(t * hidden_vecs + c) * VEC + j]
                    for s in T.unroll(m):
                        for j in T.vectorized(VEC):
                            xv[s * VEC + j] = x[((t * m + s) * hidden_vecs + c) * VEC + j]
                        for j in T.vectorized(VEC):
                            gv[s * VEC + j] = x_grad[((t * m + s) * hidden_vecs + c) * VEC + j]
                    for s in T.unroll(m):
                        for j in T.unroll(VEC):
                            acc[s] = fma(T.Cast("float32", og[j]), T.Cast("float32", xv[s * VEC + j]), acc[s])
                            gv[s * VEC + j] = T.Cast("bfloat16", fma(w[s], T.Cast("float32", og[j]),
                                                                     T.Cast("float32", gv[s * VEC + j])))
                        for j in T.vectorized(VEC):
                            x_grad[((t * m + s) * hidden_vecs + c) * VEC + j] = gv[s * VEC + j]
            allreduce(acc, red, tx)
            if tx == 0:  # every thread holds the totals
                for s in T.unroll(m):
                    mix_grad[t * m + s] = acc[s]
            T.pdl_trigger()

    return mhc_pre_apply_mix_bwd
