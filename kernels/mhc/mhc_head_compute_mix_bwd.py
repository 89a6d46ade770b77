"""mhc_head_compute_mix_bwd: the head mix's gradients and the per-CTA partial sums of the scale and base gradients
(spec: the contract's doc, kernelkiln_contract.mhc_mixes).

Grid = num_sms CTAs of 128 threads (runtime); CTA pid takes the 128-token blocks pid, pid + P, pid + 2P, ... and
thread tx the token tx of each block, one m-value row with vector loads. Thread level because the partials' bits
are decided by which thread sums which terms in which order: each thread accumulates serially, then a warp xor
butterfly (offsets 16, 8, 4, 2, 1), then the 4 warps' sums are added in warp order by one thread per column.
"""
from kernelkiln_contract.mhc_mixes import MIX_THREADS as THREADS

PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
    "tl.disable_thread_storage_sync": True,  # the one barrier before the cross-warp sums is placed by hand
}
WARPS = THREADS // 32

# Declared in kernelkiln_contract.mhc_mixes (MHC_HEAD_COMPUTE_MIX_BWD): mhc_mult, and the launch-argument names
# below, which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    f32 = "float32"
    n_mix, n_ps, n_pb = T.dynamic("n_mix, n_ps, n_pb")

    def fma(a, b, c):
        return T.call_extern(f32, "__fmaf_rn", a, b, c)

    def add(a, b):
        return T.call_extern(f32, "__fadd_rn", a, b)

    def sub(a, b):
        return T.call_extern(f32, "__fsub_rn", a, b)

    def mul(a, b):
        return T.call_extern(f32, "__fmul_rn", a, b)

    def sigmoid(z):
        return T.call_extern(f32, "__fdiv_rn", T.float32(1), add(T.float32(1), T.exp(-z)))

    @T.prim_func
    def mhc_head_compute_mix_bwd(
        output_mix_grad: T.Tensor((n_mix,), f32),  # [n, m]
        input_mix: T.Tensor((n_mix,), f32),  # [n, m]
        mhc_scale: T.Tensor((1,), f32),
        mhc_base: T.Tensor((m,), f32),
        input_mix_grad: T.Tensor((n_mix,), f32),  # [n, m]
        mhc_scale_grad_partial: T.Tensor((n_ps,), f32),  # [P, 1]
        mhc_base_grad_partial: T.Tensor((n_pb,), f32),  # [P, m]
        num_tokens: T.int32,
        num_sms: T.int32,  # P, the grid
    ):
        with T.Kernel(num_sms, threads=THREADS) as pid:
            tx = T.get_thread_binding()
            a = T.alloc_local((m,), f32)
            go = T.alloc_local((m,), f32)
            b = T.alloc_local((m,), f32)
            gi = T.alloc_local((m,), f32)
            acc_b = T.alloc_local((m,), f32)
            acc_s = T.alloc_var(f32)
            gz = T.alloc_var(f32)
            pz = T.alloc_var(f32)
            v = T.alloc_var(f32)
            red = T.alloc_shared((WARPS * (m + 1),), f32)
            T.pdl_sync()
            s = mhc_scale[0]
            for j in T.vectorized(m):
                b[j] = mhc_base[j]
            acc_s = T.float32(0)
            for j in T.unroll(m):
                acc_b[j] = T.float32(0)
            for k in T.serial(T.ceildiv(T.ceildiv(num_tokens, THREADS), num_sms)):
                t = (k * num_sms + pid) * THREADS + tx
                if t < num_tokens:
                    row = T.Cast("int64", t) * m
                    for j in T.vectorized(m):
                        a[j] = input_mix[row + j]
                    for j in T.vectorized(m):
                        go[j] = output_mix_grad[row + j]
                    for j in T.unroll(m):
                        pz = sigmoid(fma(a[j], s, b[j]))
                        gz = mul(mul(pz, sub(T.float32(1), pz)), go[j])
                        gi[j] = mul(gz, s)
                        acc_s = fma(gz, a[j], acc_s)
                        acc_b[j] = add(acc_b[j], gz)
                    for j in T.vectorized(m):
                        input_mix_grad[row + j] = gi[j]
            acc_s = T.warp_reduce_sum(acc_s)
            for j in T.unroll(m):
                acc_b[j] = T.warp_reduce_sum(acc_b[j])
            if tx % 32 == 0:
                red[(tx // 32) * (m + 1)] = acc_s
                for j in T.unroll(m):
                    red[(tx // 32) * (m + 1) + 1 + j] = acc_b[j]
            T.sync_threads()
            if tx < m + 1:
                v = red[tx]
                for w in T.unroll(1, WARPS):
                    v = add(v, red[w * (m + 1) + tx])
                if tx == 0:
                    mhc_scale_grad_partial[pid] = v
                else:
                    mhc_base_grad_partial[pid * m + tx - 1] = v
            T.pdl_trigger()

    return mhc_head_compute_mix_bwd
