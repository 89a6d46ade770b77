"""mhc_pre_big_fuse_fwd: the inference pre-block of mHC in one kernel (spec: kernelkiln_contract.mhc_sinkhorn).

One CTA per token, thread level, because the outputs must be bit-identical to the unfused chain
(mhc_reduce_partials_and_rmsnorm_fwd, mhc_pre_split_mixes_fwd, mhc_sinkhorn_fwd, mhc_pre_apply_mix_fwd): each
value is computed by one lane with the same scalar operations, in the same order, as in those kernels.

* Warp 0: every lane sums the split partials of the squares (split 0 first) and takes r = rsqrtf(sq/(m·H) + eps);
  lane l < m(m+2) sums column l of the mix partials the same way and forms z = fma(mix·r, scale, base). Lanes < m
  leave pre = sigmoid(z) + pre_eps in shared memory, lanes m .. 2m-1 store post, the comb logits go to shared
  memory. After the CTA barrier the warp runs the Sinkhorn steps of mhc_sinkhorn_fwd (its LaneGroup builders: one
  element per lane, shuffle groups of m² lanes; the upper groups compute a copy that is not stored).
* Warps 1 .. APPLY_WARPS: after the barrier, the apply-mix over H in 8-element vectors (16-byte loads of each
  stream), UNROLL vectors' loads issued before their sums: o = bf16(fma(pre_{m-1}, x_{m-1}, ... fma(pre_1, x_1,
  pre_0·x_0))).

H is a runtime value (a multiple of VEC); so are the split count, the eps values, post_mult and repeat.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernels.mhc.mhc_sinkhorn_fwd import LaneGroup
from kernelkiln_contract.mhc_sinkhorn import BIG_FUSE_APPLY_WARPS as APPLY_WARPS
from kernelkiln_contract.mhc_sinkhorn import BIG_FUSE_UNROLL as UNROLL
from kernelkiln_contract.mhc_sinkhorn import BIG_FUSE_VEC as VEC

# Declared in kernelkiln_contract.mhc_sinkhorn (MHC_PRE_BIG_FUSE_FWD): mhc_mult and the launch-argument names below.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    mm = m * m
    m3 = m * (m + 2)
    assert m3 <= 32 and mm <= 32, "warp 0 holds one mix per lane"
    apply_threads = APPLY_WARPS * 32
    threads = 32 + apply_threads
    gm_n, gs_n, r_n, pm_n, cm_n, li_n = T.dynamic("gm_n, gs_n, r_n, pm_n, cm_n, li_n")

    def fma(a, b, c):
        return T.call_extern("float32", "__fmaf_rn", a, b, c)

    def mul(a, b):
        return T.call_extern("float32", "__fmul_rn", a, b)

    def sigmoid(z):
        return T.ieee_fdiv(T.float32(1), T.ieee_add(T.float32(1), T.exp(-z)))

    @T.prim_func
    def mhc_pre_big_fuse_fwd(
        gemm_out_mul: T.Tensor((gm_n,), "float32"),  # [S, n, m3]
        gemm_out_sqrsum: T.Tensor((gs_n,), "float32"),  # [S, n]
        mhc_scale: T.Tensor((3,), "float32"),
        mhc_base: T.Tensor((m3,), "float32"),
        residual: T.Tensor((r_n,), "bfloat16"),  # [n, m, H]
        post_mix: T.Tensor((pm_n,), "float32"),  # [n, m]
        comb_mix: T.Tensor((cm_n,), "float32"),  # [n, m²]
        layer_input: T.Tensor((li_n,), "bfloat16"),  # [n, H]
        num_tokens: T.int32,
        hidden_size: T.int32,  # a multiple of VEC
        n_splits: T.int32,
        rms_eps: T.float32,
        mhc_pre_eps: T.float32,
        mhc_sinkhorn_eps: T.float32,
        mhc_post_mult_value: T.float32,
        sinkhorn_repeat: T.int32,  # >= 1
    ):
        with T.Kernel(num_tokens, threads=threads) as tok:
            tx = T.get_thread_binding()
            pre_s = T.alloc_shared((m,), "float32")
            comb_s = T.alloc_shared((mm,), "float32")
            sq = T.alloc_var("float32")
            acc = T.alloc_var("float32")
            z = T.alloc_var("float32")
            v = T.alloc_var("float32")
            e = T.alloc_var("float32")
            pre = T.alloc_local((m,), "float32")
            xb = T.alloc_local((UNROLL * m * VEC,), "bfloat16")
            ob = T.alloc_local((VEC,), "bfloat16")
            t64 = T.Cast("int64", tok)
            T.pdl_sync()
            if tx < 32:
                sq = T.float32(0)
                for s in T.serial(n_splits):
                    sq = T.ieee_add(sq, gemm_out_sqrsum[T.Cast("int64", s) * num_tokens + t64])
                r = T.rsqrt(T.ieee_fdiv(sq, T.Cast("float32", hidden_size * m)) + rms_eps)
                if tx < m3:
                    acc = T.float32(0)
                    for s in T.serial(n_splits):
                        acc = T.ieee_add(acc, gemm_out_mul[(T.Cast("int64", s) * num_tokens + t64) * m3 + tx])
                    z = fma(mul(acc, r), mhc_scale[T.min(tx // m, 2)], mhc_base[tx])
                    if tx < m:
                        pre_s[tx] = T.ieee_add(sigmoid(z), mhc_pre_eps)
                    elif tx < 2 * m:
                        post_mix[t64 * m + (tx - m)] = mul(sigmoid(z), mhc_post_mult_value)
                    else:
                        comb_s[tx - 2 * m] = z
            T.sync_threads()
            if tx < 32:
                grp = LaneGroup(T, m, tx % mm)
                v = comb_s[tx % mm]
                e = grp.exp_shifted(v)
                v = T.ieee_add(T.ieee_fdiv(e, grp.row_sum(e)), mhc_sinkhorn_eps)
                v = grp.div_eps(v, grp.col_sum(v), mhc_sinkhorn_eps)
                for _ in T.serial(sinkhorn_repeat - 1):
                    v = grp.div_eps(v, grp.row_sum(v), mhc_sinkhorn_eps)
                    v = grp.div_eps(v, grp.col_sum(v), mhc_sinkhorn_eps)
                if tx < mm:
                    comb_mix[t64 * mm + tx] = v
            else:
                for i in T.unroll(m):
                    pre[i] = pre_s[i]
                at = tx - 32
                row_vecs = hidden_size // VEC
                res_row = t64 * m * row_vecs  # in vectors
                for c0 in T.serial(T.ceildiv(row_vecs, apply_threads * UNROLL)):
                    for u in T.unroll(UNROLL):
                        # a vector past the end reloads the last one; it is not stored
                        vi = T.min((c0 * UNROLL + u) * apply_threads + at, row_vecs - 1)
                        for i in T.unroll(m):
                            for j in T.vectorized(VEC):
                                xb[(u * m + i) * VEC + j] = residual[(res_row + i * row_vecs + vi) * VEC + j]
                    for u in T.unroll(UNROLL):
                        vo = (c0 * UNROLL + u) * apply_threads + at
                        if vo < row_vecs:
                            for j in T.unroll(VEC):
                                acc = mul(pre[0], T.Cast("float32", xb[u * m * VEC + j]))
                                for i in T.unroll(1, m):
                                    acc = fma(pre[i], T.Cast("float32", xb[(u * m + i) * VEC + j]), acc)
                                ob[j] = T.Cast("bfloat16", acc)
                            for j in T.vectorized(VEC):
                                layer_input[(t64 * row_vecs + vo) * VEC + j] = ob[j]
            T.pdl_trigger()

    return mhc_pre_big_fuse_fwd
