"""Contracts of the transform ops (rotary position embedding)."""
from kernelkiln_contract._core import OpContract, Param

ROTARY_HEAD_DIMS = (32, 64, 128, 256)
ROTARY_VEC = 4  # pairs per thread item (kernels/transform/apply_rotary.py): strides come in units of it
ROTARY_THREADS = 128


def rotary_tokens_per_cta(heads, head_dim):
    """Tokens one CTA rotates: enough (token, head, 4-pair) items for its threads to take about four each."""
    items_per_token = heads * (head_dim // 2 // ROTARY_VEC)
    return max(1, ROTARY_THREADS * 4 // items_per_token)


APPLY_ROTARY = OpContract(
    op="apply_rotary",
    kernel="kernels.transform.apply_rotary",
    params=(
        Param("dtype", ("bfloat16", "float32")),
        Param("head_dim", ROTARY_HEAD_DIMS),
        Param("interleaved", (False, True)),
        Param("positions_dtype", ("int32", "int64")),
    ),
    args=("x", "cos_sin", "positions", "batch", "seqlen", "heads", "x_stride_b", "x_stride_s", "x_stride_h",
          "cache_stride", "positions_stride_b", "has_positions", "seqlen_offset", "sin_sign", "tokens_per_cta"),
    select={"tokens_per_cta": rotary_tokens_per_cta},
    doc="Rotary position embedding in place, one fma form and one rounding to the dtype (docs/SPEC.md §3.10).",
)

CONTRACTS = (APPLY_ROTARY,)
