"""Contracts of the Engram Sinkhorn optimizer ops (tile_kernels 2.1 ``engram.engram_sinkhorn_*``)."""
from kernelkiln_contract._core import OpContract, Param

SINKHORN_DTYPES = ("bfloat16", "float32")
SINKHORN_ROW = 256  # momentum: elements per peer row (numel must be a multiple); step/finalize: D's granularity
SINKHORN_THREADS = (128, 64, 32)  # the peer's candidates, tried in this order
SINKHORN_VEC = 8  # columns per thread per chunk
SINKHORN_PARTIALS_PER_SM = 3  # the step's partial rows (its CTAs): 3 per SM, as the peer


def sinkhorn_threads(head_dim):
    """Threads per row of step and finalize: the first of 128, 64, 32 that divides D into 8-column chunks (the
    peer's choice; it fixes the reduction order, so it is compile-time). ValueError if none does."""
    for t in SINKHORN_THREADS:
        if head_dim % (t * SINKHORN_VEC) == 0:
            return t
    raise ValueError(f"head_dim must be a positive multiple of {SINKHORN_ROW}, got {head_dim}")


_ORDER = (
    "The row's sum of squares is taken in the peer's order, per arch (explicit thread-level code, since D is a "
    "runtime argument here and a compile-time one in the peer's tile-level reduce_sum): thread t of T holds "
    "columns k*T*8 + t*8 + i (chunk k < C = D/(8T), element i < 8) and sums its x^2 from +0 element-major "
    "(i = 0..7 outer, k inner). On sm_90a each term is one fma(x, x, s) (nvcc contracts the peer's square into the "
    "add); on sm_100a the square is rounded first (s + round(x*x): the peer's packed fp32x2 product is not "
    "contracted), and for C = 1 the sum runs as two chains, even and odd i, added even + odd (TileLang packs that "
    "reduction two-wide). The T thread sums are combined by a xor butterfly from offset T/2 down to 1. So sm_90a "
    "and sm_100a results can differ in the last bits, each matching the peer's kernel on its arch. "
    "T is the first of 128, 64, 32 with D % (8T) == 0: it fixes the order, so it is the one compile-time "
    "parameter (select rule `threads` from D); rows, D, eps and alpha are kernel arguments.")

ENGRAM_SINKHORN_MOMENTUM_UPDATE = OpContract(
    op="engram_sinkhorn_momentum_update",
    kernel="kernels.engram.engram_sinkhorn_momentum_update",
    params=(
        Param("grad_dtype", SINKHORN_DTYPES),
        Param("momentum_dtype", SINKHORN_DTYPES),
        Param("nesterov", (False, True)),
    ),
    args=("grad", "momentum_buffer", "sinkhorn_input", "num_vecs", "beta1", "one_minus_beta1"),
    representative={"grad_dtype": "bfloat16", "momentum_dtype": "float32", "nesterov": True},
    doc=(
        "Momentum update of the Engram Sinkhorn optimizer, elementwise over grad and momentum_buffer (bf16 or fp32 "
        "each, any shape with numel % 256 == 0). With g = fp32(grad), m = fp32(momentum_buffer), b = fp32(beta1) and "
        "w = fp32(1 - beta1) (1 - beta1 taken in double first, as the peer bakes it): m' = fma(m, b, round(w * g)), "
        "two roundings; momentum_buffer is overwritten with m' rounded to its dtype (round to nearest even); the "
        "returned fp32 tensor (momentum_buffer's shape) is fma(g, w, round(b * m')) with nesterov, else m' itself, "
        "before the rounding to the buffer's dtype. Every operation is a single IEEE fp32 rounding, so the result "
        "is bitwise the peer's kernel and its torch reference on CUDA. Compile-time: the two dtypes and nesterov; "
        "beta1 and 1 - beta1 are kernel arguments."),
)

ENGRAM_SINKHORN_STEP = OpContract(
    op="engram_sinkhorn_step",
    kernel="kernels.engram.engram_sinkhorn_step",
    params=(Param("threads", SINKHORN_THREADS),),
    args=("matrix", "row_scale", "col_scale", "row_norm", "col_sumsq_partial", "num_rows", "head_dim", "num_ctas",
          "eps"),
    select={"threads": sinkhorn_threads},
    representative={"threads": 128},
    doc=(
        "One row step of the Engram Sinkhorn iteration on matrix [R, D] fp32 (D a multiple of 256) with row_scale "
        "[R] (updated in place) and col_scale [D]. Per row: x_j = round(round(r * A_j) * c_j); norm = sqrtf(sum "
        "x_j^2); row_norm = norm; inv = 1 / (norm + eps) (IEEE division); row_scale = r * inv (a product with the "
        "reciprocal, where the peer's reference divides). P = 3 * SMs partial rows (the SM count read at run time, "
        "kernelkiln.config.get_num_sms()): CTA p takes rows [p*ceil(R/P), min((p+1)*ceil(R/P), R)) in order and "
        "accumulates col_acc_j = fma(y_j, y_j, col_acc_j) with y_j = round(x_j * inv) (the old iterate times inv, "
        "not a recomputation from the new scale), from +0; its partial row col_sumsq_partial[p] is col_acc (zeros "
        "for a CTA without rows). Returns (row_norm [R], col_sumsq_partial [P, D]). " + _ORDER),
)

ENGRAM_SINKHORN_STEP_REDUCE = OpContract(
    op="engram_sinkhorn_step_reduce",
    kernel="kernels.engram.engram_sinkhorn_step_reduce",
    params=(Param("threads", (256,)),),
    args=("col_sumsq_partial", "col_sumsq", "head_dim", "num_partials"),
    representative={"threads": 256},
    doc=(
        "Column sums of the step's partial rows: col_sumsq[d] = (((+0 + partial[0, d]) + partial[1, d]) + ...) + "
        "partial[P-1, d], strictly sequential in p with IEEE fp32 additions, for any P and any D that is a "
        "multiple of 256 (the peer's requirement); written into the caller's col_sumsq [D]. The order is the peer's "
        "kernel's, so the sum is bitwise its result for the same partials, and deterministic (no atomics). "
        "Compile-time: the loading threads only; P and D are kernel arguments."),
)

ENGRAM_SINKHORN_FINALIZE = OpContract(
    op="engram_sinkhorn_finalize",
    kernel="kernels.engram.engram_sinkhorn_finalize",
    params=(Param("threads", SINKHORN_THREADS),),
    args=("matrix", "row_scale", "col_scale", "out", "num_rows", "head_dim", "eps", "alpha"),
    select={"threads": sinkhorn_threads},
    representative={"threads": 128},
    doc=(
        "The final Engram Sinkhorn matrix: per row of matrix [R, D] fp32, x_j = round(round(r * A_j) * c_j), "
        "k = alpha / (sqrtf(sum x_j^2) + eps) (IEEE division), out_j = round(x_j * k); row_scale is not modified. "
        "The peer's reference computes alpha * (r / (norm + eps)) * A * c instead, which differs in the last bits. "
        "out is a new [R, D] fp32 tensor or the caller's. " + _ORDER),
)

CONTRACTS = (ENGRAM_SINKHORN_MOMENTUM_UPDATE, ENGRAM_SINKHORN_STEP, ENGRAM_SINKHORN_STEP_REDUCE,
             ENGRAM_SINKHORN_FINALIZE)
