"""mhc_reduce_partials_and_rmsnorm_bwd: the gradients of the summed partials and of the squared sums through the
RMS factor (spec: the contract's doc, kernelkiln_contract.mhc_mixes).

One warp per (token, group) row of m3 values, as the peer's 32-thread CTA: lane l takes the columns j = l, l + 32,
.. (coalesced loads and stores), writes the out_mul gradient and accumulates ``fma(og_j, om_j, acc)`` from +0; the
lanes' partials are then added by the xor butterfly (offsets 16 .. 1), the order of the peer's lowered
``tl::AllReduce<Sum, 32>`` (for m3 <= 32 its layout is one column per lane, as here). Thread level: that order
decides sqrsum_grad's bits.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_mixes import RMS_THREADS as THREADS
from kernelkiln_contract.mhc_mixes import RMS_VEC as VEC

# Declared in kernelkiln_contract.mhc_mixes (MHC_REDUCE_PARTIALS_AND_RMSNORM_BWD): dtype, and the launch-argument
# names below, which the build checks against this PrimFunc.
ROWS = THREADS // 32  # rows per CTA, one per warp


def build(p, arch):
    import tilelang.language as T

    del arch
    f32 = p["dtype"]
    n_og, n_om, n_sq = T.dynamic("n_og, n_om, n_sq")

    def fma(a, b, c):
        return T.call_extern(f32, "__fmaf_rn", a, b, c)

    def add(a, b):
        return T.call_extern(f32, "__fadd_rn", a, b)

    def mul(a, b):
        return T.call_extern(f32, "__fmul_rn", a, b)

    def div(a, b):
        return T.call_extern(f32, "__fdiv_rn", a, b)

    @T.prim_func
    def mhc_reduce_partials_and_rmsnorm_bwd(
        out_grad: T.Tensor((n_og,), f32),  # [n, m3]
        out_mul: T.Tensor((n_om,), f32),  # [n, G, m3]
        sqrsum: T.Tensor((n_sq,), f32),  # [n, G]
        out_mul_grad: T.Tensor((n_om,), f32),  # [n, G, m3]
        sqrsum_grad: T.Tensor((n_sq,), f32),  # [n, G]
        num_rows: T.int32,  # n · G
        n_rms_group: T.int32,  # G
        num_col_vecs: T.int32,  # m3 / 4
        rms_group_size: T.int32,
        rms_eps: T.float32,
        rms_eps_group: T.float32,  # fp32(rms_eps · rms_group_size), the product taken in float64 on the host
    ):
        with T.Kernel(T.ceildiv(num_rows, ROWS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            acc = T.alloc_var(f32)
            og = T.alloc_var(f32)
            sq = T.alloc_var(f32)
            r = T.alloc_var(f32)
            T.pdl_sync()
            lane = tx % 32
            i = bx * ROWS + tx // 32
            if i < num_rows:  # a whole warp per row: the shuffles below see every lane
                i64 = T.Cast("int64", i)
                t64 = T.Cast("int64", T.truncdiv(i, n_rms_group))
                m3 = num_col_vecs * VEC
                sq = sqrsum[i64]
                r = T.rsqrt(add(div(sq, T.Cast(f32, rms_group_size)), rms_eps))
                acc = T.float32(0)
                for k in T.serial(T.ceildiv(m3, 32)):
                    j = k * 32 + lane
                    if j < m3:
                        og = out_grad[t64 * m3 + j]
                        out_mul_grad[i64 * m3 + j] = mul(og, r)
                        acc = fma(og, out_mul[i64 * m3 + j], acc)
                for o in T.unroll(5):  # offsets 16 .. 1
                    acc = add(acc, T.shfl_xor(acc, T.shift_right(16, o)))
                if lane == 0:
                    sqrsum_grad[i64] = div(div(mul(acc, r), add(sq, rms_eps_group)), T.float32(-2))
            T.pdl_trigger()

    return mhc_reduce_partials_and_rmsnorm_bwd
