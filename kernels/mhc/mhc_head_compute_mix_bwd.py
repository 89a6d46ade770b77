"""mhc_head_compute_mix_bwd: the head mix's gradients and the per-CTA partial sums of the scale and base gradients
(spec: the contract's doc, kernelkiln_contract.mhc_mixes).

Grid = num_sms CTAs of 128 threads (runtime); CTA pid takes the 32-token blocks pid, pid + P, pid + 2P, ... (the
peer's token_block_size) and thread tx the elements tx, tx + 128, ... of each block's 32·m (token, column) values,
so its column tx % m is fixed. Thread level because the partials' bits are decided by which thread sums which terms
in which order: the peer's (its T.Parallel layout and tl::AllReduce, read from its lowered CUDA): each thread
accumulates serially, then a xor butterfly over the CTA, offsets 64 .. 1 for the scale and 64 .. m for each column
of the base (kernels.common.butterfly).
"""
from kernels.common.butterfly import block_allreduce
from kernelkiln_contract.mhc_mixes import HEAD_BWD_BLOCK_TOKENS as BLOCK
from kernelkiln_contract.mhc_mixes import MIX_THREADS as THREADS

PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
    "tl.disable_thread_storage_sync": True,  # the butterfly's barriers are placed by hand
}

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

    per_thread = max(1, BLOCK * m // THREADS)  # elements of a block per thread (m = 2: threads 64.. idle)
    scale_sum = block_allreduce(T, THREADS, 1, add)
    base_sum = block_allreduce(T, THREADS, 1, add, lowest=m)

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
            acc_s = T.alloc_local((1,), f32)
            acc_b = T.alloc_local((1,), f32)
            red = T.alloc_shared((THREADS,), f32)  # the butterflies' scratch, the scale's then the base's
            pz = T.alloc_var(f32)
            gz = T.alloc_var(f32)
            T.pdl_sync()
            s = mhc_scale[0]
            b = mhc_base[tx % m]
            acc_s[0] = T.float32(0)
            acc_b[0] = T.float32(0)
            for k in T.serial(T.ceildiv(T.ceildiv(num_tokens, BLOCK), num_sms)):
                blk = k * num_sms + pid
                for i in T.unroll(per_thread):
                    e = i * THREADS + tx  # the element of the block: token e // m, column e % m
                    if e < BLOCK * m:
                        if blk * BLOCK + e // m < num_tokens:
                            idx = T.Cast("int64", blk) * (BLOCK * m) + e
                            a = input_mix[idx]
                            pz = sigmoid(fma(a, s, b))
                            gz = mul(mul(pz, sub(T.float32(1), pz)), output_mix_grad[idx])
                            input_mix_grad[idx] = mul(gz, s)
                            acc_s[0] = fma(gz, a, acc_s[0])
                            acc_b[0] = add(acc_b[0], gz)
            scale_sum(acc_s, red, tx)
            T.sync_threads()  # the scale's last reads of red come before the base's first writes
            base_sum(acc_b, red, tx)
            if tx == 0:
                mhc_scale_grad_partial[pid] = acc_s[0]
            if tx < m:
                mhc_base_grad_partial[pid * m + tx] = acc_b[0]
            T.pdl_trigger()

    return mhc_head_compute_mix_bwd
