"""mhc_multilayer_recompute: the pre/post mix chain of L layers recomputed in one pass (spec: the contract's doc,
kernelkiln_contract.mhc_streams).

Thread level: one thread per (token, group of VEC columns) keeps its m stream vectors of the running residual in
registers (as fp32 of the bf16 values it stored) across the layers, so each layer costs one read of the layer
output and the mixes and the writes of the layer input and the new residual. The layer count is a runtime value:
each layer's tensors come from the int64 address table (``T.make_tensor`` over a loaded address), and the loop is
a runtime loop. The apply-mix and post formulas are those of mhc_pre_apply_mix_fwd and mhc_post_fwd, written with
the same __fmul_rn/__fmaf_rn order, so the outputs are bit-identical to that chain.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_streams import STREAM_THREADS as THREADS
from kernelkiln_contract.mhc_streams import STREAM_VEC as VEC

# Declared in kernelkiln_contract.mhc_streams (MHC_MULTILAYER_RECOMPUTE): mhc_mult, and the launch-argument names
# below, which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    r_n, tab_n = T.dynamic("r_n, tab_n")

    def fma(a, b, c):
        return T.call_extern("float32", "__fmaf_rn", a, b, c)

    def fmul(a, b):
        return T.call_extern("float32", "__fmul_rn", a, b)

    @T.prim_func
    def mhc_multilayer_recompute(
        initial_residual: T.Tensor((r_n,), "bfloat16"),  # [n, m, H]
        # addresses: pre mixes [L], layer inputs [L], layer outputs [L_post], post mixes [L_post],
        # comb mixes [L_post], residuals [L_post]
        ptr_table: T.Tensor((tab_n,), "int64"),
        num_vecs: T.int32,  # n·H / VEC
        hidden_vecs: T.int32,  # H / VEC
        num_layers: T.int32,  # L
        num_post: T.int32,  # L_post (L - 1 or L)
    ):
        with T.Kernel(T.ceildiv(num_vecs, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            res = T.alloc_local((m * VEC,), "float32")
            rb = T.alloc_local((m * VEC,), "bfloat16")
            lo = T.alloc_local((VEC,), "bfloat16")
            ov = T.alloc_local((VEC,), "bfloat16")
            acc = T.alloc_local((VEC,), "float32")
            a1 = T.alloc_local((1,), "float32")
            w = T.alloc_local((m,), "float32")
            pw = T.alloc_local((m,), "float32")
            cw = T.alloc_local((m * m,), "float32")
            item = bx * THREADS + tx  # int32: the host keeps n·H/VEC + THREADS below 2**31
            big = T.Cast("int64", num_vecs) * (VEC * m * m)  # an extent covering every table tensor
            T.pdl_sync()
            if item < num_vecs:
                t = T.Cast("int64", T.truncdiv(item, hidden_vecs))
                c = T.Cast("int64", T.truncmod(item, hidden_vecs))
                flat = T.Cast("int64", item)
                for s in T.unroll(m):
                    for j in T.vectorized(VEC):
                        rb[s * VEC + j] = initial_residual[((t * m + s) * hidden_vecs + c) * VEC + j]
                for s in T.unroll(m * VEC):
                    res[s] = T.Cast("float32", rb[s])
                for layer in T.serial(num_layers):
                    pre = T.make_tensor(ptr_table[layer], (big,), "float32")
                    layer_input = T.make_tensor(ptr_table[num_layers + layer], (big,), "bfloat16")
                    for s in T.unroll(m):
                        w[s] = pre[t * m + s]
                    for j in T.unroll(VEC):
                        acc[j] = fmul(w[0], res[j])
                    for s in T.unroll(1, m):
                        for j in T.unroll(VEC):
                            acc[j] = fma(w[s], res[s * VEC + j], acc[j])
                    for j in T.unroll(VEC):
                        ov[j] = T.Cast("bfloat16", acc[j])
                    for j in T.vectorized(VEC):
                        layer_input[flat * VEC + j] = ov[j]
                    if layer < num_post:
                        base = 2 * num_layers + layer
                        layer_output = T.make_tensor(ptr_table[base], (big,), "bfloat16")
                        post = T.make_tensor(ptr_table[base + num_post], (big,), "float32")
                        comb = T.make_tensor(ptr_table[base + 2 * num_post], (big,), "float32")
                        residual = T.make_tensor(ptr_table[base + 3 * num_post], (big,), "bfloat16")
                        for s in T.unroll(m):
                            pw[s] = post[t * m + s]
                        for s in T.unroll(m * m):
                            cw[s] = comb[t * (m * m) + s]
                        for j in T.vectorized(VEC):
                            lo[j] = layer_output[flat * VEC + j]
                        for o in T.unroll(m):
                            for j in T.unroll(VEC):
                                a1[0] = fmul(cw[o], res[j])  # mhc_post_fwd's order
                                a1[0] = fma(pw[o], T.Cast("float32", lo[j]), a1[0])
                                for i in T.unroll(1, m):
                                    a1[0] = fma(cw[i * m + o], res[i * VEC + j], a1[0])
                                rb[o * VEC + j] = T.Cast("bfloat16", a1[0])
                        for o in T.unroll(m):
                            for j in T.vectorized(VEC):
                                residual[((t * m + o) * hidden_vecs + c) * VEC + j] = rb[o * VEC + j]
                        for s in T.unroll(m * VEC):
                            res[s] = T.Cast("float32", rb[s])
            T.pdl_trigger()

    return mhc_multilayer_recompute
