"""Contracts of the fused quantization (RMSNorm, SwiGLU, per-channel) ops."""
from kernelkiln_contract._core import OpContract, Param
from kernelkiln_contract.quant import PLAIN_INPUTS

E4M3_INPUT = "float8_e4m3fn"

# ---- norm_forward ---------------------------------------------------------------------------------------------------

NORM_FORWARD = OpContract(
    op="norm_forward",
    kernel="kernels.quant.norm_forward",
    params=(
        Param("x_dtype", PLAIN_INPUTS),
        Param("out_kind", ("plain", "e4m3_fp32", "e4m3_ue8m0")),
    ),
    args=("x", "residual", "weight", "y", "residual_out", "rstd", "q", "sf", "num_tokens", "batch", "hidden",
          "x_stride_b", "x_stride_t", "r_stride_b", "r_stride_t", "y_stride", "ro_stride", "q_stride", "sf_stride_t",
          "sf_stride_k", "has_residual", "has_weight", "write_y", "write_rstd", "round_sf", "eps", "out_scale",
          "clamp_min"),
    doc="RMSNorm with an optional fused residual add, alone or fused with the 1x32 e4m3 per-token cast "
        "(fp32 or packed UE8M0 scales).",
)

# ---- norm_backward: two stages, two PrimFuncs -----------------------------------------------------------------------

NORM_BACKWARD_MAIN_ARGS = ("dy", "x", "weight", "rstd", "rog", "dx", "partial", "num_tokens", "hidden", "num_ctas",
                           "dy_stride", "x_stride", "rog_stride", "dx_stride", "has_weight", "has_rog", "out_scale")
NORM_BACKWARD_REDUCE_ARGS = ("partial", "weight_grad", "hidden", "num_partials", "accumulate")


def _norm_backward_args(p):
    return NORM_BACKWARD_MAIN_ARGS if p["stage"] == "main" else NORM_BACKWARD_REDUCE_ARGS


NORM_BACKWARD = OpContract(
    op="norm_backward",
    kernel="kernels.quant.norm_backward",
    params=(
        Param("stage", ("main", "reduce")),
        Param("dtype", PLAIN_INPUTS),  # x's dtype (main), weight_grad's (reduce)
    ),
    args=_norm_backward_args,
    doc="RMSNorm backward with a deterministic weight gradient: the main pass writes dx and per-CTA partial rows, "
        "the reduce pass adds them in a fixed order (optionally into weight_grad).",
)

# ---- per_channel_cast -----------------------------------------------------------------------------------------------

PER_CHANNEL_ROW_MODES = ("full", "tail", "gather")


def per_channel_in_block(num_per_channels, quantized_input):
    """in_block of per_channel_cast: the input's channels per scale for pre-quantized e4m3 input, 0 for bf16/fp32."""
    return num_per_channels if quantized_input else 0


def per_channel_rows(fused, gather):
    """The row mode of per_channel_cast: "full" for the 2.1 op (T % gm == 0), "tail" for v1 per_channel_cast_fused
    (a partial last token block) and "gather" for it with pos_to_token."""
    if gather:
        return "gather"
    return "tail" if fused else "full"


def _per_channel_constraints(p):
    if (p["in_dtype"] == E4M3_INPUT) != (p["in_block"] != 0):
        return "in_block is the e4m3 input's channels per scale (32 or 128), and 0 for bf16/fp32 input"
    return None


PER_CHANNEL_CAST = OpContract(
    op="per_channel_cast",
    kernel="kernels.quant.per_channel_cast",
    params=(
        Param("in_dtype", PLAIN_INPUTS + (E4M3_INPUT,)),
        Param("num_per_tokens", (32, 128)),
        Param("sf_kind", ("fp32", "ue8m0")),
        # added for FP8 input and v1 per_channel_cast_fused: older manifests get the 2.1 bf16/fp32 kernel
        Param("in_block", (0, 32, 128), default=0),
        Param("rows", PER_CHANNEL_ROW_MODES, default="full"),
    ),
    args=("x", "out", "sf", "num_token_blocks", "hidden_div128", "round_sf", "clamp_min", "x_sf", "x_sf_stride_t",
          "x_sf_stride_k", "pos_to_token", "num_rows"),
    constraints=_per_channel_constraints,
    select={"in_block": per_channel_in_block, "rows": per_channel_rows},
    doc="Column-wise (gm x 1 block) e4m3 quantization of bf16/fp32 or pre-quantized e4m3 input, with the row "
        "modes of v1 per_channel_cast_fused (partial last block, gathered rows).",
)

# ---- per_channel_transpose ------------------------------------------------------------------------------------------


def _per_channel_transpose_constraints(p):
    if p["prologue"] == "plain" and not p["transpose"]:
        return "the plain prologue is only built transposed (untransposed is per_channel_cast)"
    return None


PER_CHANNEL_TRANSPOSE = OpContract(
    op="per_channel_transpose",
    kernel="kernels.quant.per_channel_transpose",
    params=(
        Param("prologue", ("plain", "swiglu")),
        Param("num_per_tokens", (32, 128)),
        Param("transpose", (False, True)),
    ),
    args=("x", "out", "sf", "cols_div64", "tokens_div128", "round_sf", "use_clamp", "clamp_value", "clamp_min"),
    constraints=_per_channel_transpose_constraints,
    doc="v1 per_channel_cast_and_transpose and swiglu_forward_and_per_channel_cast_and_transpose: per-channel e4m3 "
        "quantization of bf16 x or of its SwiGLU, stored transposed or row-major.",
)

# ---- swiglu_forward / swiglu_backward -------------------------------------------------------------------------------

SWIGLU_FLOAT_FORMATS = ("bfloat16", "float32")
SWIGLU_CHANNEL_BLOCKS = (32, 128)
SWIGLU_SF_KINDS = ("fp32", "ue8m0")
# Rows per thread of swiglu_forward: one value for every dtype and format (the one the default manifest builds).
SWIGLU_FORWARD_ROWS = 4


def swiglu_forward_rows():
    """Rows per thread of the swiglu_forward variant the runtime uses."""
    return SWIGLU_FORWARD_ROWS


def _swiglu_output_problem(p):
    """The output format's scale parameters: e4m3 takes 32/128-channel blocks and fp32/UE8M0 scales, bf16/fp32
    output none."""
    if p["fmt"] == "e4m3":
        if p["num_per_channels"] not in SWIGLU_CHANNEL_BLOCKS:
            return "num_per_channels must be 32 or 128 for e4m3"
        if p["sf_kind"] not in SWIGLU_SF_KINDS:
            return "sf_kind must be fp32 or ue8m0 for e4m3"
    elif p["num_per_channels"] != 0 or p["sf_kind"] != "none":
        return "bf16/fp32 output takes num_per_channels 0 and sf_kind none"
    return None


SWIGLU_FORWARD = OpContract(
    op="swiglu_forward",
    kernel="kernels.quant.swiglu_forward",
    params=(
        Param("in_dtype", PLAIN_INPUTS),
        Param("fmt", ("e4m3",) + SWIGLU_FLOAT_FORMATS),
        Param("num_per_channels", (0,) + SWIGLU_CHANNEL_BLOCKS),
        Param("sf_kind", SWIGLU_SF_KINDS + ("none",)),
        Param("rows", (2, 4, 8)),
    ),
    args=("x", "out", "sf", "psum", "weights", "counts", "num_rows", "hidden_div64", "x_stride_vec", "num_experts",
          "alignment", "with_weight", "rsf", "use_clamp", "clamp_value", "count_clamp", "sf_stride_t", "sf_stride_k",
          "round_sf", "clamp_min"),
    constraints=_swiglu_output_problem,
    select={"rows": swiglu_forward_rows},
    doc="Fused SwiGLU over the expert-major layout, stored as bf16/fp32 or per-token cast to e4m3.",
)


def _swiglu_backward_constraints(p):
    if p["fmt"] == "e4m3":
        if p["x_dtype"] != E4M3_INPUT:
            return "e4m3 output takes float8_e4m3fn input (with scales)"
    elif p["x_dtype"] not in SWIGLU_FLOAT_FORMATS or p["grad_dtype"] != p["x_dtype"]:
        return "bf16/fp32 output takes bf16/fp32 x with act_x_grad of the same dtype"
    return _swiglu_output_problem(p)


SWIGLU_BACKWARD = OpContract(
    op="swiglu_backward",
    kernel="kernels.quant.swiglu_backward",
    params=(
        Param("x_dtype", (E4M3_INPUT,) + SWIGLU_FLOAT_FORMATS),
        Param("grad_dtype", SWIGLU_FLOAT_FORMATS),
        Param("fmt", ("e4m3",) + SWIGLU_FLOAT_FORMATS),
        Param("num_per_channels", (0,) + SWIGLU_CHANNEL_BLOCKS),
        Param("sf_kind", SWIGLU_SF_KINDS + ("none",)),
    ),
    args=("x", "x_sf", "act_x_grad", "weights", "psum", "x_grad", "q", "sf", "weight_grad", "act_out", "num_rows",
          "hidden_div64", "x_stride_u", "dy_stride_u", "x_sf_stride", "num_experts", "alignment", "with_weight", "rsf",
          "use_clamp", "clamp_value", "do_recompute", "sf_stride_t", "sf_stride_k", "round_sf", "clamp_min"),
    constraints=_swiglu_backward_constraints,
    doc="SwiGLU backward over the expert-major layout: bf16/fp32 gradients, or FP8 input with the gradient "
        "per-token cast to e4m3.",
)

CONTRACTS = (NORM_FORWARD, NORM_BACKWARD, PER_CHANNEL_CAST, PER_CHANNEL_TRANSPOSE, SWIGLU_FORWARD, SWIGLU_BACKWARD)
