"""Contracts of the transpose ops."""
from kernelkiln_contract._core import OpContract, Param

# 16-byte vectors per thread of batched_transpose, per element width: the only variants built. Chosen on the H200
# together with the runtime's tile order (m_fast: consecutive CTAs walk M; python/kernelkiln/transpose/_transpose.py)
# (one run, copy ceiling 4.24 TB/s; [8,7168,4096] / [8,2048,7168] / [16384,7168]): fp32 4 vectors (256 threads)
# 55/66/67%, 8 vectors (128 threads) 79/84/83%, 8 + m_fast 80/85/85%, 16 vectors 77-82%; bf16 4 vectors 72/80/78%,
# + m_fast 73/81/81%, 8 or 16 vectors 69-73%; e4m3 4 vectors 88/88/81%, + m_fast 86/88/77%, 8 vectors 79-86%.
TUNED_VECTORS = {1: 4, 2: 4, 4: 8}


def transpose_vectors(elem_bytes):
    """The vectors per thread of the batched_transpose variant built for this element width."""
    return TUNED_VECTORS[elem_bytes]


def transpose_wide_loads(elem_bytes, data_ptr, row_stride, batch_stride):
    """Whether batched_transpose loads 16-byte vectors: every row start 16-byte aligned (the address and the row and
    batch strides, in elements). Otherwise it loads 4 elements at a time, which for fp32 are 16 bytes already."""
    vector = 16 // elem_bytes
    return elem_bytes == 4 or (data_ptr % 16 == 0 and row_stride % vector == 0 and batch_stride % vector == 0)


def _transpose_constraints(p):
    if p["elem_bytes"] == 4 and not p["wide_loads"]:
        return "fp32 loads of 4 elements are 16 bytes already: use wide_loads=True"
    if p["vectors_per_thread"] != TUNED_VECTORS[p["elem_bytes"]]:
        return f"vectors_per_thread for elem_bytes={p['elem_bytes']} is {TUNED_VECTORS[p['elem_bytes']]} (tuned)"
    return None


BATCHED_TRANSPOSE = OpContract(
    op="batched_transpose",
    kernel="kernels.transpose.batched_transpose",
    params=(
        Param("elem_bytes", (1, 2, 4)),
        Param("wide_loads", (False, True)),
        # only the tuned value of each width is valid, so a manifest need not name it: the default lists them all
        # and the constraints keep the tuned one
        Param("vectors_per_thread", tuple(sorted(set(TUNED_VECTORS.values()))),
              default=sorted(set(TUNED_VECTORS.values()))),
    ),
    args=("x", "y", "num_batches", "tiles_x", "tiles_y", "x_stride_m", "x_stride_b", "m_fast"),
    constraints=_transpose_constraints,
    select={"vectors_per_thread": transpose_vectors, "wide_loads": transpose_wide_loads},
    doc="[B, M, N] -> contiguous [B, N, M], moving raw bits: one variant per element width (docs/SPEC.md §3.3).",
)

CONTRACTS = (BATCHED_TRANSPOSE,)
