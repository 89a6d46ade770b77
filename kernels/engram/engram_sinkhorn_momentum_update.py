"""engram_sinkhorn_momentum_update: momentum in place and the fp32 Sinkhorn input (spec: the contract's doc,
kernelkiln_contract.engram_sinkhorn).

Elementwise, thread level: each thread takes 8 consecutive elements (16-byte vector accesses; the op checks the
alignment). Per element, with g = fp32(grad) and m = fp32(momentum):
m' = fma_rn(m, beta1, omb * g) (the product rounded first), momentum = round(m') to its dtype, and
sinkhorn_input = fma_rn(g, omb, beta1 * m') with Nesterov, else m' (fp32, before the rounding to the buffer's
dtype). Every operation is an explicit __fmul_rn / __fmaf_rn so nvcc cannot contract or reassociate them.

beta1 and omb = 1 - beta1 are runtime fp32 arguments: the peer bakes both as fp32 constants rounded from the
Python doubles beta1 and 1.0 - beta1, and the op passes exactly those two roundings.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401

# Declared in kernelkiln_contract.engram_sinkhorn (ENGRAM_SINKHORN_MOMENTUM_UPDATE): grad_dtype, momentum_dtype and
# nesterov, and the launch-argument names below, which the build checks against this PrimFunc.
THREADS = 256
VEC = 8


def build(p, arch):
    import tilelang.language as T

    del arch
    gdt, mdt, nesterov = p["grad_dtype"], p["momentum_dtype"], bool(p["nesterov"])
    f32 = "float32"
    g_vec = 16 // (2 if gdt == "bfloat16" else 4)  # elements per 16-byte access
    m_vec = 16 // (2 if mdt == "bfloat16" else 4)
    n_g, n_m, n_o = T.dynamic("n_g, n_m, n_o")

    def fmul(a, b):
        return T.call_extern(f32, "__fmul_rn", a, b)

    def fma(a, b, c):
        return T.call_extern(f32, "__fmaf_rn", a, b, c)

    @T.prim_func
    def engram_sinkhorn_momentum_update(
        grad: T.Tensor((n_g,), gdt),
        momentum_buffer: T.Tensor((n_m,), mdt),  # updated in place
        sinkhorn_input: T.Tensor((n_o,), f32),
        num_vecs: T.int32,  # numel / 8
        beta1: T.float32,
        one_minus_beta1: T.float32,
    ):
        with T.Kernel(T.ceildiv(num_vecs, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            g_in = T.alloc_local((VEC,), gdt)
            m_in = T.alloc_local((VEC,), mdt)
            m_out = T.alloc_local((VEC,), mdt)
            res = T.alloc_local((VEC,), f32)
            T.pdl_sync()
            v = bx * THREADS + tx
            if v < num_vecs:
                base = T.Cast("int64", v) * VEC
                for h in T.unroll(VEC // g_vec):
                    for j in T.vectorized(g_vec):
                        g_in[h * g_vec + j] = grad[base + h * g_vec + j]
                for h in T.unroll(VEC // m_vec):
                    for j in T.vectorized(m_vec):
                        m_in[h * m_vec + j] = momentum_buffer[base + h * m_vec + j]
                for j in T.unroll(VEC):
                    g = T.Cast(f32, g_in[j])
                    m = fma(T.Cast(f32, m_in[j]), beta1, fmul(one_minus_beta1, g))
                    m_out[j] = T.Cast(mdt, m)
                    if nesterov:
                        res[j] = fma(g, one_minus_beta1, fmul(beta1, m))
                    else:
                        res[j] = m
                for h in T.unroll(VEC // m_vec):
                    for j in T.vectorized(m_vec):
                        momentum_buffer[base + h * m_vec + j] = m_out[h * m_vec + j]
                for h in T.unroll(2):
                    for j in T.vectorized(4):
                        sinkhorn_input[base + h * 4 + j] = res[h * 4 + j]
            T.pdl_trigger()

    return engram_sinkhorn_momentum_update
