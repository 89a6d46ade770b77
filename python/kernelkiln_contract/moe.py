"""Contracts of the MoE routing ops."""
from kernelkiln_contract._core import OpContract, Param

LANES = 32  # one warp per token: lane L holds experts [L * EPL, (L + 1) * EPL)
MAX_EXPERTS_PER_LANE = 16
EXPERTS_PER_LANE = tuple(range(1, MAX_EXPERTS_PER_LANE + 1))


def experts_per_lane(num_experts):
    """EPL = ceil(E / 32): the experts each lane of a token's warp holds, the routers' compile-time parameter."""
    return -(-num_experts // LANES)


def topk_vector_loads(num_experts, aligned):
    """Whether topk_gate's rows can load as float4: whole float4 chunks per lane and a 16-byte aligned base (the
    scalar-load variant serves every case; the runtime also needs the variant to be built)."""
    return aligned and experts_per_lane(num_experts) % 4 == 0 and num_experts % 4 == 0


ASCEND_LANES = 64  # fp32 lanes of an Ascend vector register
ASCEND_VREGS = tuple(range(1, 9))  # E up to 512, as for CUDA


def ascend_vregs(num_experts):
    """The Ascend topk_gate's registers per row, ceil(E / 64): its compile-time parameter."""
    return -(-num_experts // ASCEND_LANES)


def _topk_constraints(p):
    if p["vector_loads"] and p["experts_per_lane"] % 4:
        return "vector_loads needs experts_per_lane % 4 == 0"
    return None


TOPK_GATE = OpContract(
    op="topk_gate",
    kernel="kernels.moe.topk_gate",
    params=(Param("experts_per_lane", EXPERTS_PER_LANE), Param("vector_loads", (False, True))),
    args=("scores", "topk_idx", "err", "num_tokens", "num_experts", "experts_div4", "num_topk"),
    constraints=_topk_constraints,
    select={"experts_per_lane": experts_per_lane, "vector_loads": topk_vector_loads},
    doc="The K highest scores per row, ties to the smaller expert index (docs/SPEC.md §3.1).",
    ascend=OpContract(  # docs/ASCEND.md: one row per core at a time in ceil(E / 64) 64-lane registers
        op="topk_gate",
        kernel="kernels.moe.topk_gate_ascend",
        params=(Param("num_vregs", ASCEND_VREGS),),
        args=("scores", "topk_idx", "err", "num_cores", "num_tokens", "num_experts", "num_topk"),
        select={"num_vregs": ascend_vregs},
        doc="topk_gate on Ascend 950: the same op; scores [T, E] fp32 contiguous, topk_idx [T, K] int64, err [2] int32.",
    ),
)

# ---------------------------------------------------------------- the warp-per-token routers (EPL = ceil(E / 32))

MOE_TOPK_GATE = OpContract(
    op="moe_topk_gate",
    kernel="kernels.moe.moe_topk_gate",
    params=(Param("experts_per_lane", EXPERTS_PER_LANE),),
    args=("logits", "bias", "image_bias", "image_mask", "mask", "fix_mask", "rand_mask", "to_physical_map",
          "logical_count", "unmapped", "scores", "topk_idx", "topk_weights", "err", "num_tokens", "num_experts",
          "experts_div4", "num_topk", "num_shared", "routed_scaling_factor", "ep_rank", "map_cols", "num_logical",
          "unmapped_stride", "flags"),
    select={"experts_per_lane": experts_per_lane},
    doc="The tile_kernels 2.1 sqrt-softplus fused router, forward (docs/SPEC.md §2.3, §3.1, §3.7).",
)

MOE_TOPK_GATE_BACKWARD = OpContract(
    op="moe_topk_gate_backward",
    kernel="kernels.moe.moe_topk_gate_backward",
    params=(Param("experts_per_lane", EXPERTS_PER_LANE),),
    args=("scores", "topk_idx", "topk_weights", "grad_topk_weights", "mask", "grad_scores_sum", "out", "num_tokens",
          "num_experts", "experts_div4", "num_topk", "routed_scaling_factor", "tokens_per_seq", "flags"),
    select={"experts_per_lane": experts_per_lane},
    doc="The gradient of the 2.1 sqrt-softplus router w.r.t. the logits (docs/SPEC.md §3.1).",
)

TOP2_SUM_GATE = OpContract(
    op="top2_sum_gate",
    kernel="kernels.moe.top2_sum_gate",
    params=(Param("experts_per_lane", EXPERTS_PER_LANE),),
    args=("logits", "bias", "mask", "fix_mask", "to_physical_map", "logical_count", "unmapped", "topk_idx",
          "topk_weights", "err", "num_tokens", "num_experts", "experts_div4", "num_topk", "num_groups",
          "num_topk_groups", "lpg_shift", "num_shared", "routed_scaling_factor", "ep_rank", "experts_per_rank",
          "tp_rank", "num_tp_ranks", "map_cols", "unmapped_stride", "scoring", "flags"),
    select={"experts_per_lane": experts_per_lane},
    doc="The v1 DeepSeek-V3 group-limited router (docs/SPEC.md §2.3, §3.1).",
)

# ---------------------------------------------------------------- group ranking and weight normalization

TOPK_SUM_AND_TOPK_GROUP_IDX = OpContract(
    op="topk_sum_and_topk_group_idx",
    kernel="kernels.moe.topk_sum_group",
    params=(Param("threads", (128, 256)),),
    args=("scores", "out", "num_tokens", "num_groups", "experts_per_group", "num_topk_sum", "num_topk_groups",
          "lpg_shift", "vec4"),
    doc="The best groups of a grouped score row (docs/SPEC.md §2.3, §3.1); threads only names the CTA size.",
)

NORMALIZE_WEIGHT = OpContract(
    op="normalize_weight",
    kernel="kernels.moe.normalize_weight",
    params=(Param("threads", (128, 256)),),
    args=("w", "denominator", "out", "num_tokens", "num_topk", "w_stride", "group_shift", "num_ctas"),
    doc="Each row of the weights divided by the router's butterfly sum + 1e-20 (docs/SPEC.md §2.3, §3.1); threads "
        "only names the CTA size.",
)

# ---------------------------------------------------------------- v1 dispatch / combine

EXPAND_VEC_BYTES = (16, 4, 1)  # the copy unit, widest first


def expand_vec_bytes(row_bytes, *offsets):
    """The copy unit of expand_to_fused: the widest of 16, 4 and 1 bytes that divides the row's bytes and every
    offset given (the row stride in bytes and the data pointers), so that every unit access is aligned."""
    for vb in EXPAND_VEC_BYTES:
        if row_bytes % vb == 0 and all(v % vb == 0 for v in offsets):
            return vb
    return 1


EXPAND_TO_FUSED = OpContract(
    op="expand_to_fused",
    kernel="kernels.moe.expand_fused",
    params=(Param("vec_bytes", EXPAND_VEC_BYTES),),
    args=("x", "out", "token_topk_to_pos", "pos_to_expert", "x_sf", "out_sf", "num_tokens", "num_topk", "num_expanded",
          "row_units", "x_stride_units", "sf_cols", "x_sf_stride_t", "x_sf_stride_k", "out_sf_stride_n",
          "out_sf_stride_k", "pad_ctas"),
    select={"vec_bytes": expand_vec_bytes},
    doc="expand_to_fused / expand_to_fused_with_sf: token rows (and their scales) to expert-major slots, padding "
        "rows zeroed (docs/SPEC.md §3.1).",
)

FUSED_DTYPES = ("bfloat16", "float32", "float8_e4m3fn")
# (input, output) dtypes of reduce_fused: the plain dtypes to themselves, and every input to e4m3
REDUCE_FUSED_PAIRS = (("bfloat16", "bfloat16"), ("float32", "float32"), ("bfloat16", "float8_e4m3fn"),
                      ("float32", "float8_e4m3fn"), ("float8_e4m3fn", "float8_e4m3fn"))


def _reduce_fused_constraints(p):
    if (p["in_dtype"], p["out_dtype"]) not in REDUCE_FUSED_PAIRS:
        return f"(in_dtype, out_dtype) must be one of {list(REDUCE_FUSED_PAIRS)}"
    return None


REDUCE_FUSED = OpContract(
    op="reduce_fused",
    kernel="kernels.moe.reduce_fused",
    params=(Param("in_dtype", FUSED_DTYPES), Param("out_dtype", FUSED_DTYPES)),
    args=("x", "topk_weights", "token_topk_to_pos", "out", "sf", "x_sf", "num_tokens", "num_topk", "num_expanded",
          "hidden_chunks", "has_weights", "has_x_sf", "has_sf"),
    constraints=_reduce_fused_constraints,
    doc="The weighted combine of expert-major rows back to token order (docs/SPEC.md §3.1).",
)

# ---------------------------------------------------------------- v1 auxiliary ops

MASK_INDICES_BY_TP = OpContract(
    op="mask_indices_by_tp",
    kernel="kernels.moe.mask_indices_by_tp",
    params=(Param("dtype", ("int8", "int16", "int32", "int64", "uint8")),),
    args=("indices", "out", "numel", "num_cols", "row_stride", "per_gpu", "per_dp", "num_tp_ranks", "tp_rank"),
    doc="Keep the experts of this TP rank's EP shards, renumbered locally (docs/SPEC.md §3.1).",
)

ID_HISTOGRAM = OpContract(
    op="id_histogram",
    kernel="kernels.moe.id_histogram",
    params=(Param("threads", (256, 512)),),
    args=("ids", "counts", "freq", "numel", "num_cols", "row_stride", "num_bins", "per_cta", "num_ctas", "scale",
          "den", "flags"),
    doc="The counts of ids in [0, B), for v1 group_count and aux_fi (docs/SPEC.md §3.1).",
)

INPLACE_UNIQUE_GROUP_INDICES = OpContract(
    op="inplace_unique_group_indices",
    kernel="kernels.moe.unique_group_indices",
    params=(Param("threads", (128, 256)),),
    args=("ids", "num_rows", "num_cols", "row_stride", "rows_per_warp", "num_ctas"),
    doc="Every later repeat of an id within a row becomes -1, in place (docs/SPEC.md §3.1).",
)


def fused_mapping_threads(num_experts):
    """CTA size of get_fused_mapping's kernels: 256 threads for up to 256 experts, 512 beyond (up to 512)."""
    return 256 if num_experts <= 256 else 512


_FUSED_MAPPING_ARGS = {
    "count": ("topk_idx", "pos_to_expert", "pos_to_token", "pos_to_token_topk", "cnt", "numel", "num_experts",
              "num_expanded", "chunk", "num_ctas"),
    "scan": ("cnt", "expert_start", "expert_end", "num_tokens_per_expert", "num_experts", "num_groups", "alignment"),
    "place": ("topk_idx", "token_topk_to_pos", "pos_to_expert", "pos_to_token", "pos_to_token_topk", "cnt",
              "expert_start", "numel", "num_topk", "num_experts", "num_expanded", "chunk", "num_ctas"),
}

GET_FUSED_MAPPING = OpContract(
    op="get_fused_mapping",
    kernel="kernels.moe.fused_mapping",
    params=(Param("stage", tuple(_FUSED_MAPPING_ARGS)), Param("threads", (256, 512))),
    # three stages (count per CTA, scan, place), three PrimFuncs with their own arguments
    args=lambda p: _FUSED_MAPPING_ARGS[p["stage"]],
    select={"threads": fused_mapping_threads},
    doc="v1's dispatch mapping: token-expert pairs to expert-contiguous slots, deterministic (docs/SPEC.md §3.1).",
)

CONTRACTS = (TOPK_GATE, GET_FUSED_MAPPING, MOE_TOPK_GATE, MOE_TOPK_GATE_BACKWARD, TOP2_SUM_GATE, TOPK_SUM_AND_TOPK_GROUP_IDX,
             NORMALIZE_WEIGHT, EXPAND_TO_FUSED, REDUCE_FUSED, MASK_INDICES_BY_TP, ID_HISTOGRAM,
             INPLACE_UNIQUE_GROUP_INDICES)
