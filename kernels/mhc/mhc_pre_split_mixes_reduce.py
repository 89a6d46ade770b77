"""mhc_pre_split_mixes_reduce: the scale and base gradients from mhc_pre_split_mixes_bwd's partial rows (spec: the
contract's doc, kernelkiln_contract.mhc_mixes).

One CTA of 128 threads per column of the concatenated [base (m3) | scale (3)] partials, the peer's reduce kernel as
TileLang 0.1.15 lowers it: thread tx adds the rows tx, tx + 128, ... to +0 in that order, then a xor butterfly over
the CTA (offsets 64, 32 through shared memory, 16 .. 1 by shuffles; kernels.common.butterfly). The partial count and
m3 are runtime values.
"""
from kernels.common.butterfly import block_allreduce
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

    allreduce = block_allreduce(T, THREADS, 1, add)

    @T.prim_func
    def mhc_pre_split_mixes_reduce(
        mhc_scale_grad_partial: T.Tensor((n_ps,), f32),  # [P, 3]
        mhc_base_grad_partial: T.Tensor((n_pb,), f32),  # [P, m3]
        mhc_scale_grad: T.Tensor((3,), f32),
        mhc_base_grad: T.Tensor((n_b,), f32),  # [m3]
        num_partials: T.int32,
        mhc_mult3: T.int32,
    ):
        with T.Kernel(mhc_mult3 + 3, threads=THREADS) as col:
            tx = T.get_thread_binding()
            v = T.alloc_local((1,), f32)
            red = T.alloc_shared((THREADS,), f32)
            T.pdl_sync()
            v[0] = T.float32(0)
            for i in T.serial(T.ceildiv(num_partials, THREADS)):
                r = i * THREADS + tx
                if r < num_partials:
                    if col < mhc_mult3:
                        v[0] = add(v[0], mhc_base_grad_partial[r * mhc_mult3 + col])
                    else:
                        v[0] = add(v[0], mhc_scale_grad_partial[r * 3 + col - mhc_mult3])
            allreduce(v, red, tx)
            if tx == 0:
                if col < mhc_mult3:
                    mhc_base_grad[col] = v[0]
                else:
                    mhc_scale_grad[col - mhc_mult3] = v[0]
            T.pdl_trigger()

    return mhc_pre_split_mixes_reduce
