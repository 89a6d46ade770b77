"""expand_to_mhc_fwd: the hidden state copied into each of the m residual streams (spec: the contract's doc,
kernelkiln_contract.mhc_streams).

Thread level: one thread per (token, group of VEC columns), a 16-byte load of x and m 16-byte stores, with the
token and column of a thread from its flat index (H is a runtime value, so a tile of a fixed width would leave
partial tiles for most H; the flat mapping has none).
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_streams import STREAM_THREADS as THREADS
from kernelkiln_contract.mhc_streams import STREAM_VEC as VEC

# Declared in kernelkiln_contract.mhc_streams (EXPAND_TO_MHC_FWD): mhc_mult, and the launch-argument names below,
# which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    x_n, o_n = T.dynamic("x_n, o_n")

    @T.prim_func
    def expand_to_mhc_fwd(
        x: T.Tensor((x_n,), "bfloat16"),  # [n, H]
        o: T.Tensor((o_n,), "bfloat16"),  # [n, m, H]
        num_vecs: T.int32,  # n·H / VEC
        hidden_vecs: T.int32,  # H / VEC
    ):
        with T.Kernel(T.ceildiv(num_vecs, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_local((VEC,), "bfloat16")
            item = bx * THREADS + tx  # int32: the host keeps n·H/VEC + THREADS below 2**31
            T.pdl_sync()
            if item < num_vecs:
                t = T.Cast("int64", T.truncdiv(item, hidden_vecs))
                c = T.Cast("int64", T.truncmod(item, hidden_vecs))
                for j in T.vectorized(VEC):
                    v[j] = x[T.Cast("int64", item) * VEC + j]
                for s in T.unroll(m):
                    for j in T.vectorized(VEC):
                        o[((t * m + s) * hidden_vecs + c) * VEC + j] = v[j]
            T.pdl_trigger()

    return expand_to_mhc_fwd
