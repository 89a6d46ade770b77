"""mhc_pre_split_mixes_bwd: the gradient of the split mixes' logits and the per-CTA partial sums of the scale and
base gradients (spec: the contract's doc, kernelkiln_contract.mhc_mixes); mhc_pre_split_mixes_reduce sums the
partials.

Grid = P CTAs of one warp (P = the SM count at run time); CTA pid takes the 32-token blocks pid, pid + P, ... (the
peer's token_block_size), lane l token l of each block, its whole row (16-byte loads; a lane past the last token
computes on zeros, as the peer's kernel does). Thread level because the partials' bits are decided by the
summation order, the peer's (its kernel lowered by TileLang 0.1.15, where only the first of its four warps has
tokens): per block and column, ``+0 + g`` of every lane summed by a xor butterfly (offsets 16 .. 1) and added to
the column's running sum; the scale sums accumulate per lane over its tokens and are butterflied at the end.
"""
from kernelkiln_contract.mhc_mixes import SPLIT_BWD_BLOCK_TOKENS as BLOCK

PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
    "tl.disable_thread_storage_sync": True,  # one warp: nothing to synchronize
}

# Declared in kernelkiln_contract.mhc_mixes (MHC_PRE_SPLIT_MIXES_BWD): mhc_mult, and the launch-argument names
# below, which the build checks against this PrimFunc.


def _vec(n):
    return 4 if n % 4 == 0 else (2 if n % 2 == 0 else 1)


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    m2, m3 = m * m, m * (m + 2)
    cols = m3 + 3  # the partial columns: m3 base, then 3 scale
    f32 = "float32"
    v3, vm, vm2 = _vec(m3), _vec(m), _vec(m2)  # 16-byte pieces where the row length allows
    n_in, n_m, n_m2, n_ps, n_pb = T.dynamic("n_in, n_m, n_m2, n_ps, n_pb")

    def fma(a, b, c):
        return T.call_extern(f32, "__fmaf_rn", a, b, c)

    def add(a, b):
        return T.call_extern(f32, "__fadd_rn", a, b)

    def sub(a, b):
        return T.call_extern(f32, "__fsub_rn", a, b)

    def mul(a, b):
        return T.call_extern(f32, "__fmul_rn", a, b)

    def div(a, b):
        return T.call_extern(f32, "__fdiv_rn", a, b)

    def sigmoid(z):
        return div(T.float32(1), add(T.float32(1), T.exp(-z)))

    @T.macro
    def warp_sum(buf, i):
        """tl::AllReduce over the 32 lanes, in place: ``v + shfl_xor(v, o)`` for o = 16, 8, 4, 2, 1."""
        for o in T.unroll(5):
            buf[i] = add(buf[i], T.shfl_xor(buf[i], T.shift_right(16, o)))

    @T.prim_func
    def mhc_pre_split_mixes_bwd(
        pre_layer_mix_grad: T.Tensor((n_m,), f32),  # [n, m]
        post_layer_mix_grad: T.Tensor((n_m,), f32),  # [n, m]
        comb_res_mix_grad: T.Tensor((n_m2,), f32),  # [n, m²]
        input_mixes: T.Tensor((n_in,), f32),  # [n, m3]
        post_layer_mix: T.Tensor((n_m,), f32),  # [n, m], the forward's output
        mhc_scale: T.Tensor((3,), f32),
        mhc_base: T.Tensor((m3,), f32),
        input_mixes_grad: T.Tensor((n_in,), f32),  # [n, m3]
        mhc_scale_grad_partial: T.Tensor((n_ps,), f32),  # [P, 3]
        mhc_base_grad_partial: T.Tensor((n_pb,), f32),  # [P, m3]
        mhc_post_mult_value: T.float32,
        num_tokens: T.int32,
        num_partials: T.int32,  # P, the grid
    ):
        with T.Kernel(num_partials, threads=BLOCK) as pid:
            lane = T.get_thread_binding()
            a = T.alloc_local((m3,), f32)
            b = T.alloc_local((m3,), f32)
            g = T.alloc_local((m3,), f32)
            q = T.alloc_local((m,), f32)
            acc = T.alloc_local((cols,), f32)  # m3 base sums (the same in every lane), then 3 scale sums (per lane)
            tmp = T.alloc_local((1,), f32)
            pz = T.alloc_var(f32)
            T.pdl_sync()
            s0 = mhc_scale[0]
            s1 = mhc_scale[1]
            s2 = mhc_scale[2]
            for c in T.unroll(m3 // v3):
                for j in T.vectorized(v3):
                    b[c * v3 + j] = mhc_base[c * v3 + j]
            for j in T.unroll(cols):
                acc[j] = T.float32(0)
            for k in T.serial(T.ceildiv(T.ceildiv(num_tokens, BLOCK), num_partials)):
                blk = k * num_partials + pid
                if blk * BLOCK < num_tokens:
                    t = blk * BLOCK + lane
                    t64 = T.Cast("int64", t)
                    if t < num_tokens:
                        for c in T.unroll(m3 // v3):
                            for j in T.vectorized(v3):
                                a[c * v3 + j] = input_mixes[t64 * m3 + c * v3 + j]
                        for c in T.unroll(m // vm):
                            for j in T.vectorized(vm):
                                g[c * vm + j] = pre_layer_mix_grad[t64 * m + c * vm + j]
                        for c in T.unroll(m // vm):
                            for j in T.vectorized(vm):
                                g[m + c * vm + j] = post_layer_mix_grad[t64 * m + c * vm + j]
                        for c in T.unroll(m2 // vm2):
                            for j in T.vectorized(vm2):
                                g[2 * m + c * vm2 + j] = comb_res_mix_grad[t64 * m2 + c * vm2 + j]
                        for c in T.unroll(m // vm):
                            for j in T.vectorized(vm):
                                q[c * vm + j] = post_layer_mix[t64 * m + c * vm + j]
                    else:  # the peer's padded rows: zeros through the same arithmetic
                        for j in T.unroll(m3):
                            a[j] = T.float32(0)
                            g[j] = T.float32(0)
                        for j in T.unroll(m):
                            q[j] = T.float32(0)
                    for j in T.unroll(m):
                        pz = sigmoid(fma(a[j], s0, b[j]))
                        g[j] = mul(mul(g[j], pz), sub(T.float32(1), pz))
                    for j in T.unroll(m):
                        g[m + j] = mul(mul(g[m + j], q[j]), sub(T.float32(1), div(q[j], mhc_post_mult_value)))
                    for j in T.unroll(m3):  # the block's column sums, then the running sums
                        tmp[0] = add(T.float32(0), g[j])
                        warp_sum(tmp, 0)
                        acc[j] = add(acc[j], tmp[0])
                    for j in T.unroll(m):
                        acc[m3] = fma(g[j], a[j], acc[m3])
                        g[j] = mul(g[j], s0)
                    for j in T.unroll(m):
                        acc[m3 + 1] = fma(g[m + j], a[m + j], acc[m3 + 1])
                        g[m + j] = mul(g[m + j], s1)
                    for j in T.unroll(m2):
                        acc[m3 + 2] = fma(g[2 * m + j], a[2 * m + j], acc[m3 + 2])
                        g[2 * m + j] = mul(g[2 * m + j], s2)
                    if t < num_tokens:
                        for c in T.unroll(m3 // v3):
                            for j in T.vectorized(v3):
                                input_mixes_grad[t64 * m3 + c * v3 + j] = g[c * v3 + j]
            for j in T.unroll(3):
                warp_sum(acc, m3 + j)
            if lane == 0:
                for j in T.unroll(m3):
                    mhc_base_grad_partial[pid * m3 + j] = acc[j]
                for j in T.unroll(3):
                    mhc_scale_grad_partial[pid * 3 + j] = acc[m3 + j]
            T.pdl_trigger()

    return mhc_pre_split_mixes_bwd
