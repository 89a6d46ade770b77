"""mask_indices_by_tp (v1): keep the experts of this TP rank's EP shards, renumbered locally (docs/SPEC.md §3.1).

Element-wise over [T, K] in the index dtype (compile-time; every integer dtype the reference takes):
with per_gpu = n / num_ep_ranks and per_dp = num_tp_ranks * per_gpu, an id v >= 0 with
(v // per_gpu) % num_tp_ranks == tp_rank becomes w - (w // per_dp) * (per_dp - per_gpu), w = v - tp_rank * per_gpu;
every other entry becomes -1 (255 for uint8, as the reference's full_like(-1)). The arithmetic is int64,
as the reference's on int64 inputs; for narrower dtypes every kept value fits the dtype.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401

# Declared in kernelkiln_contract.moe (MASK_INDICES_BY_TP): the index dtypes, and the launch-argument names below,
# which the build checks against this PrimFunc.
THREADS = 256


def build(p, arch):
    import tilelang.language as T

    del arch
    dt = p["dtype"]
    in_numel, out_numel = T.dynamic("in_numel, out_numel")

    @T.prim_func
    def mask_indices_by_tp(
        indices: T.Tensor((in_numel,), dt),  # [T, K], inner stride 1
        out: T.Tensor((out_numel,), dt),  # [T, K] contiguous
        numel: T.int32,
        num_cols: T.int32,
        row_stride: T.int32,
        per_gpu: T.int64,
        per_dp: T.int64,
        num_tp_ranks: T.int64,
        tp_rank: T.int64,
    ):
        with T.Kernel(T.ceildiv(numel, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            i = bx * THREADS + tx
            v = T.alloc_var("int64")
            T.pdl_sync()
            if i < numel:
                r = T.truncdiv(i, num_cols)  # i >= 0: truncation is floor, without TIR's sign fix-ups
                v = T.Cast("int64", indices[T.Cast("int64", r) * row_stride + (i - r * num_cols)])
                keep = v >= T.int64(0) and T.truncmod(T.truncdiv(v, per_gpu), num_tp_ranks) == tp_rank
                w = v - tp_rank * per_gpu
                local = w - T.truncdiv(w, per_dp) * (per_dp - per_gpu)  # w >= 0 when kept: trunc == floor
                out[i] = T.Cast(dt, T.if_then_else(keep, local, T.int64(-1)))
            T.pdl_trigger()

    return mask_indices_by_tp
