"""mhc_post_bwd: the post mix's backward (spec: the contract's doc, kernelkiln_contract.mhc_streams).

Thread level, because the comb and post gradients' bits are the order of their reductions over H: one CTA per
token; thread t walks the column groups k·THREADS + t, loads d_o's m vectors, the residual's m and x's, writes
d_residual and d_x (fma chains over the output streams from +0) and accumulates the m·m + m partials
``fma(r_i, g_o, .)`` and ``fma(x, g_o, .)`` column by column. The partials are reduced over all THREADS (64) threads
by the xor butterfly of TileLang's ``tl::AllReduce`` (offset 32 through shared memory, then 16 .. 1 by shuffles):
the peer's kernel (64 threads, blocks of gcd(512, H) columns) lowers its reducers to exactly this, with the same
per-thread layout when H is a multiple of THREADS·VEC = 512.
"""
from kernels.common.butterfly import block_allreduce
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_streams import POST_BWD_THREADS as THREADS
from kernelkiln_contract.mhc_streams import STREAM_VEC as VEC

# Declared in kernelkiln_contract.mhc_streams (MHC_POST_BWD): mhc_mult, and the launch-argument names below, which
# the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    r_n, c_n, p_n, x_n = T.dynamic("r_n, c_n, p_n, x_n")
    nred = m * m + m  # d_comb (i-major), then d_post

    def fma(a, b, c):
        return T.call_extern("float32", "__fmaf_rn", a, b, c)

    def fadd(a, b):
        return T.call_extern("float32", "__fadd_rn", a, b)

    allreduce = block_allreduce(T, THREADS, nred, fadd)

    @T.prim_func
    def mhc_post_bwd(
        d_o: T.Tensor((r_n,), "bfloat16"),  # [n, m, H]
        comb_res_mix: T.Tensor((c_n,), "float32"),  # [n, m, m]
        residual: T.Tensor((r_n,), "bfloat16"),  # [n, m, H]
        post_layer_mix: T.Tensor((p_n,), "float32"),  # [n, m]
        x: T.Tensor((x_n,), "bfloat16"),  # [n, H]
        d_x: T.Tensor((x_n,), "bfloat16"),
        d_residual: T.Tensor((r_n,), "bfloat16"),
        d_post_layer_mix: T.Tensor((p_n,), "float32"),
        d_comb_res_mix: T.Tensor((c_n,), "float32"),
        num_tokens: T.int32,
        hidden_vecs: T.int32,  # H / VEC
    ):
        with T.Kernel(num_tokens, threads=THREADS) as bx:
            tx = T.get_thread_binding()
            gv = T.alloc_local((m * VEC,), "bfloat16")
            rv = T.alloc_local((m * VEC,), "bfloat16")
            xv = T.alloc_local((VEC,), "bfloat16")
            ov = T.alloc_local((VEC,), "bfloat16")
            cw = T.alloc_local((m * m,), "float32")
            pw = T.alloc_local((m,), "float32")
            acc = T.alloc_local((nred,), "float32")
            d = T.alloc_local((1,), "float32")
            red = T.alloc_shared((nred * THREADS,), "float32")
            t = T.Cast("int64", bx)
            T.pdl_sync()
            for s in T.unroll(m * m):
                cw[s] = comb_res_mix[t * (m * m) + s]
            for s in T.unroll(m):
                pw[s] = post_layer_mix[t * m + s]
            for s in T.unroll(nred):
                acc[s] = T.float32(0)
            for k in T.serial(T.ceildiv(hidden_vecs, THREADS)):
                c = T.Cast("int64", k * THREADS + tx)
                if c < hidden_vecs:
                    for s in T.unroll(m):
                        for j in T.vectorized(VEC):
                            gv[s * VEC + j] = d_o[((t * m + s) * hidden_vecs + c) * VEC + j]
                        for j in T.vectorized(VEC):
                            rv[s * VEC + j] = residual[((t * m + s) * hidden_vecs + c) * VEC + j]
                    for j in T.vectorized(VEC):
                        xv[j] = x[(t * hidden_vecs + c) * VEC + j]
                    for i in T.unroll(m):  # d_residual row i
                        for j in T.unroll(VEC):
                            d[0] = T.float32(0)
                            for o in T.unroll(m):
                                d[0] = fma(cw[i * m + o], T.Cast("float32", gv[o * VEC + j]), d[0])
                            ov[j] = T.Cast("bfloat16", d[0])
                        for j in T.vectorized(VEC):
                            d_residual[((t * m + i) * hidden_vecs + c) * VEC + j] = ov[j]
                    for j in T.unroll(VEC):
                        d[0] = T.float32(0)
                        for o in T.unroll(m):
                            d[0] = fma(pw[o], T.Cast("float32", gv[o * VEC + j]), d[0])
                        ov[j] = T.Cast("bfloat16", d[0])
                    for j in T.vectorized(VEC):
                        d_x[(t * hidden_vecs + c) * VEC + j] = ov[j]
                    for j in T.unroll(VEC):
                        for i in T.unroll(m):
                            for o in T.unroll(m):
                                acc[i * m + o] = fma(T.Cast("float32", rv[i * VEC + j]),
                                                     T.Cast("float32", gv[o * VEC + j]), acc[i * m + o])
                        for o in T.unroll(m):
                            acc[m * m + o] = fma(T.Cast("float32", xv[j]), T.Cast("float32", gv[o * VEC + j]),
                                                 acc[m * m + o])
            allreduce(acc, red, tx)
            if tx == 0:  # every thread holds the totals
                for s in T.unroll(m * m):
                    d_comb_res_mix[t * (m * m) + s] = acc[s]
                for s in T.unroll(m):
                    d_post_layer_mix[t * m + s] = acc[m * m + s]
            T.pdl_trigger()

    return mhc_post_bwd
