"""mhc_pre_split_mixes_fwd: the pre, post and comb mixes of one layer from its m(m+2) mix logits (spec: the
contract's doc, kernelkiln_contract.mhc_mixes).

One thread per token, 128 tokens per CTA: the thread loads its row of m3 logits with 16-byte loads, computes the
three pieces with every rounding pinned (fma, IEEE division and adds, so that mhc_pre_big_fuse_fwd reproduces them
bit for bit) and stores the pre, post and comb rows with vector stores. Thread level for that pinning.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_mixes import MIX_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_mixes (MHC_PRE_SPLIT_MIXES_FWD): mhc_mult, and the launch-argument names
# below, which the build checks against this PrimFunc.


def _vec(n):
    return 4 if n % 4 == 0 else (2 if n % 2 == 0 else 1)


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    m2, m3 = m * m, m * (m + 2)
    f32 = "float32"
    v3, vm, vm2 = _vec(m3), _vec(m), _vec(m2)  # 16-byte pieces where the row length allows
    n_in, n_m, n_m2 = T.dynamic("n_in, n_m, n_m2")

    def fma(a, b, c):
        return T.call_extern(f32, "__fmaf_rn", a, b, c)

    def add(a, b):
        return T.call_extern(f32, "__fadd_rn", a, b)

    def mul(a, b):
        return T.call_extern(f32, "__fmul_rn", a, b)

    def sigmoid(z):
        return T.call_extern(f32, "__fdiv_rn", T.float32(1), add(T.float32(1), T.exp(-z)))

    @T.prim_func
    def mhc_pre_split_mixes_fwd(
        input_mixes: T.Tensor((n_in,), f32),  # [n, m3]
        mhc_scale: T.Tensor((3,), f32),
        mhc_base: T.Tensor((m3,), f32),
        pre_layer_mix: T.Tensor((n_m,), f32),  # [n, m]
        post_layer_mix: T.Tensor((n_m,), f32),  # [n, m]
        comb_res_mix: T.Tensor((n_m2,), f32),  # [n, m²]
        mhc_post_mult_value: T.float32,
        mhc_pre_eps: T.float32,
        num_tokens: T.int32,
    ):
        with T.Kernel(T.ceildiv(num_tokens, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            a = T.alloc_local((m3,), f32)
            b = T.alloc_local((m3,), f32)
            pre = T.alloc_local((m,), f32)
            post = T.alloc_local((m,), f32)
            comb = T.alloc_local((m2,), f32)
            T.pdl_sync()
            t = bx * THREADS + tx
            if t < num_tokens:
                t64 = T.Cast("int64", t)
                s0 = mhc_scale[0]
                s1 = mhc_scale[1]
                s2 = mhc_scale[2]
                for c in T.unroll(m3 // v3):
                    for j in T.vectorized(v3):
                        a[c * v3 + j] = input_mixes[t64 * m3 + c * v3 + j]
                for c in T.unroll(m3 // v3):
                    for j in T.vectorized(v3):
                        b[c * v3 + j] = mhc_base[c * v3 + j]
                for j in T.unroll(m):
                    pre[j] = add(sigmoid(fma(a[j], s0, b[j])), mhc_pre_eps)
                for j in T.unroll(m):
                    post[j] = mul(sigmoid(fma(a[m + j], s1, b[m + j])), mhc_post_mult_value)
                for j in T.unroll(m2):
                    comb[j] = fma(a[2 * m + j], s2, b[2 * m + j])
                for c in T.unroll(m // vm):
                    for j in T.vectorized(vm):
                        pre_layer_mix[t64 * m + c * vm + j] = pre[c * vm + j]
                for c in T.unroll(m // vm):
                    for j in T.vectorized(vm):
                        post_layer_mix[t64 * m + c * vm + j] = post[c * vm + j]
                for c in T.unroll(m2 // vm2):
                    for j in T.vectorized(vm2):
                        comb_res_mix[t64 * m2 + c * vm2 + j] = comb[c * vm2 + j]
            T.pdl_trigger()

    return mhc_pre_split_mixes_fwd
