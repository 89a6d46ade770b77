"""mhc_pre_split_mixes_reduce: the scale and base gradients from mhc_pre_split_mixes_bwd's partial rows (spec: the
contract's doc, kernelkiln_contract.mhc_mixes).

One CTA; thread c owns column c of the concatenated [base (m3) | scale (3)] partials and adds the P rows strictly in
row order. The partial count and m3 are runtime values (a few hundred loads per thread: latency, not bandwidth).
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_mixes import SPLIT_REDUCE_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_mixes (MHC_PRE_SPLIT_MIXES_REDUCE): dtype, and the launch-argument names
# below, which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    f32 = p["dtype"]
    n_ps, n_pb, n_b = T.dynamic("n_ps, n_pb, n_b")

    def add(a, b):
        return T.call_extern(f32, "__fadd_rn", a, b)

    @T.prim_func
    def mhc_pre_split_mixes_reduce(
        mhc_scale_grad_partial: T.Tensor((n_ps,), f32),  # [P, 3]
        mhc_base_grad_partial: T.Tensor((n_pb,), f32),  # [P, m3]
        mhc_scale_grad: T.Tensor((3,), f32),
        mhc_base_grad: T.Tensor((n_b,), f32),  # [m3]
        num_partials: T.int32,
        mhc_mult3: T.int32,
    ):
        with T.Kernel(1, threads=THREADS) as _:
            tx = T.get_thread_binding()
            v = T.alloc_var(f32)
            T.pdl_sync()
            v = T.float32(0)
            if tx < mhc_mult3:
                for r in T.serial(num_partials):
                    v = add(v, mhc_base_grad_partial[r * mhc_mult3 + tx])
                mhc_base_grad[tx] = v
            elif tx < mhc_mult3 + 3:
                for r in T.serial(num_partials):
                    v = add(v, mhc_scale_grad_partial[r * 3 + tx - mhc_mult3])
                mhc_scale_grad[tx - mhc_mult3] = v
            T.pdl_trigger()

    return mhc_pre_split_mixes_reduce
