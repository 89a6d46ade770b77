"""Contracts of the quantization ops (casts, fused SwiGLU and RMSNorm casts)."""
from kernelkiln_contract._core import OpContract, Param

PLAIN_INPUTS = ("bfloat16", "float32")
QUANTIZED_INPUTS = ("float8_e4m3fn", "e2m1")
SF_KINDS = ("fp32", "e4m3", "ue8m0")

# Rows per thread of per_token_cast: 4, measured on the H200 (benchmarks/bench_tuning.py), and 8 for bf16 -> e4m3
# with computed scales (benchmarks/results/TARGETS.md has the A/B). Keyed by (input dtype, fmt); tuning scripts
# override it.
PER_TOKEN_ROWS = {("bfloat16", "e4m3"): 8}
PER_TOKEN_DEFAULT_ROWS = 4


def per_token_rows(in_dtype, fmt, precomputed=False, stochastic=False, roundtrip=False):
    """Rows per thread of the per_token_cast variant the runtime uses for these compile-time values."""
    if precomputed or stochastic or roundtrip:
        return PER_TOKEN_DEFAULT_ROWS
    return PER_TOKEN_ROWS.get((in_dtype, fmt), PER_TOKEN_DEFAULT_ROWS)


def _per_token_constraints(p):
    if (p["in_sf_kind"] == "none") != (p["in_dtype"] in PLAIN_INPUTS):
        return "in_sf_kind is 'none' exactly for plain (bf16/fp32) input"
    if p["precomputed"] and p["in_sf_kind"] != "none":
        return "precomputed scales take plain input"
    if p["precomputed"] and p["sf_kind"] == "ue8m0":
        return "precomputed scales are fp32 or e4m3"
    if p["stochastic"] and (p["fmt"] != "e4m3" or p["in_sf_kind"] != "none"):
        return "stochastic_cast rounds plain bf16/fp32 input to e4m3 only"
    if p["roundtrip"] and (p["in_sf_kind"] != "none" or p["precomputed"] or p["stochastic"] or p["sf_kind"] == "ue8m0"):
        return "roundtrip (per_token_cast_and_cast_back) takes plain input, computed fp32 or e4m3 scales, no stochastic"
    return None


PER_TOKEN_CAST = OpContract(
    op="per_token_cast",
    kernel="kernels.quant.per_token_cast",
    params=(
        Param("in_dtype", PLAIN_INPUTS + QUANTIZED_INPUTS),
        Param("in_sf_kind", ("none",) + SF_KINDS),
        Param("fmt", ("e4m3", "e2m1")),
        Param("num_per_channels", (16, 32, 64, 128)),
        Param("sf_kind", SF_KINDS),
        Param("precomputed", (False, True)),
        Param("rows", (2, 4, 8)),
        Param("stochastic", (False, True), default=False),
        Param("roundtrip", (False, True), default=False),
    ),
    args=("x", "out", "sf", "num_tokens", "hidden_div64", "x_stride_vec", "out_stride_unit", "sf_stride_t",
          "sf_stride_k", "round_sf", "write_data", "clamp_min", "x_sf", "in_sf_stride_t", "in_sf_stride_k",
          "in_block_m", "in_block_k", "num_row_blocks", "num_col_blocks"),
    constraints=_per_token_constraints,
    select={"rows": per_token_rows},
    doc="Row-wise block quantization to e4m3 / e2m1, re-quantization of FP8/FP4 input, and the one-pass "
        "quantize-and-dequantize of per_token_cast_and_cast_back (docs/SPEC.md §3.2).",
    ascend=OpContract(  # docs/ASCEND.md: bf16 input, computed scales, row- or column-major (a runtime flag)
        op="per_token_cast",
        kernel="kernels.quant.per_token_cast_ascend",
        params=(
            Param("in_dtype", ("bfloat16",)),
            Param("fmt", ("e4m3", "e2m1")),
            Param("num_per_channels", (32, 128)),
            Param("sf_kind", ("fp32", "ue8m0")),
        ),
        args=("x", "out", "sf", "hidden", "round_sf", "clamp_min", "sf_col_major", "num_cores", "num_tokens",
              "x_ld", "out_ld", "sf_rows", "sf_ld"),
        doc="per_token_cast on Ascend 950, the same numerics; x [T, H] bf16 with row stride x_ld (H a multiple of "
            "64), out [T, out_ld] bytes (e4m3, or packed e2m1), sf [sf_rows, sf_ld] 32-bit words (fp32 scales or "
            "packed UE8M0 int32): row-major sf[t, w] (sf_rows = T, sf_ld = its row stride) or, with sf_col_major, "
            "sf[w, t] (sf_rows = the words per row, sf_ld = the column stride).",
    ),
)


# cast: the (input, output) dtype pairs each rounding mode converts (stochastic rounding only narrows)
CAST_STOCHASTIC_PAIRS = (("float32", "bfloat16"), ("float32", "float8_e4m3fn"), ("bfloat16", "float8_e4m3fn"))
CAST_RNE_PAIRS = CAST_STOCHASTIC_PAIRS + (("bfloat16", "float32"), ("float8_e4m3fn", "bfloat16"),
                                          ("float8_e4m3fn", "float32"))
CAST_DTYPES = ("float32", "bfloat16", "float8_e4m3fn")


def _cast_constraints(p):
    pairs = CAST_STOCHASTIC_PAIRS if p["stochastic_rounding"] else CAST_RNE_PAIRS
    if (p["in_dtype"], p["out_dtype"]) not in pairs:
        return f"(in_dtype, out_dtype) must be one of {pairs} for stochastic_rounding={p['stochastic_rounding']}"
    return None


CAST = OpContract(
    op="cast",
    kernel="kernels.quant.cast",
    params=(
        Param("in_dtype", CAST_DTYPES),
        Param("out_dtype", CAST_DTYPES),
        Param("stochastic_rounding", (False, True)),
    ),
    args=("x", "out", "n", "quad_base"),
    constraints=_cast_constraints,
    doc="Element-wise dtype conversion of a flat buffer, round-to-nearest-even or deterministic stochastic "
        "rounding (docs/SPEC.md §3.2 quant.cast, §2.2).",
)


def cast_back_per_channel(block_k):
    """Whether cast_back's per-channel variant (one scale per element column) serves blocks of block_k channels:
    exactly for g == 1; every g >= 16 takes the other variant."""
    return block_k == 1


CAST_BACK = OpContract(
    op="cast_back",
    kernel="kernels.quant.cast_back",
    params=(
        Param("fmt", ("e4m3", "e2m1")),
        Param("out_dtype", ("bfloat16", "float32")),
        Param("per_channel", (False, True)),
    ),
    args=("x", "out", "sf", "sf_e4m3", "sf_bytes", "num_tokens", "hidden_div64", "x_stride_unit", "out_stride_unit",
          "block_m", "block_k", "sf_mode", "sf_stride_t", "sf_stride_k", "pack_shift_m", "pack_shift_k"),
    select={"per_channel": cast_back_per_channel},
    doc="Dequantization of e4m3 / packed e2m1 data with fp32, e4m3 or packed UE8M0 block scales in any layout "
        "(docs/SPEC.md §3.2).",
)

PER_BLOCK_CAST_LOSSLESS = OpContract(
    op="per_block_cast_lossless",
    kernel="kernels.quant.per_block_cast_lossless",
    # e4m3 is the only target into which every e2m1 block converts exactly
    params=(Param("fmt", ("e4m3",)),),
    args=("x", "out", "in_sf", "in_sfb", "out_sf", "out_sfb", "err", "num_tokens", "hidden_div128", "x_stride_q",
          "out_stride_q", "in_mode", "in_sf_t", "in_sf_k", "lg_bm_in", "lg_kq_in", "out_mode", "out_sf_t", "out_sf_k",
          "lg_bm_out", "lg_kq_out"),
    doc="Exact MXFP4 (e2m1, power-of-two scales) to e4m3 with coarser blocks; inexact blocks are reported through "
        "a host-mapped error word (docs/SPEC.md §3.2).",
)

TRANSPOSE_WEIGHT_SF = OpContract(
    op="transpose_weight_sf",
    kernel="kernels.quant.transpose_weight_sf",
    params=(Param("sf_dtype", ("float32",)),),
    args=("inp", "out", "table", "err", "num_weights", "num_tasks", "lg_bs"),
    doc="batched_transpose_weight_sf: fp32 power-of-two weight block scales of many weights to two packed UE8M0 "
        "layouts, in one pointer-table launch (docs/SPEC.md §3.2).",
)

PER_BLOCK_CAST = OpContract(
    op="per_block_cast",
    kernel="kernels.quant.per_block_cast",
    params=(Param("in_dtype", PLAIN_INPUTS), Param("fmt", ("e4m3", "e2m1"))),
    args=("x", "out", "sf", "sf_bytes", "num_tokens", "hidden_div64", "x_stride_vec", "out_stride_unit", "block_m",
          "block_k_lanes", "sf_mode", "sf_stride_t", "sf_stride_k", "round_sf", "precomputed", "write_data",
          "clamp_min"),
    doc="2-D block quantization of bf16 / fp32 to e4m3 / e2m1, with computed or precomputed scales, or the scales "
        "only (docs/SPEC.md §3.2).",
)


E5M6_ENCODE_ARGS = ("x", "out", "sf", "sf_bytes", "num_tokens", "groups", "x_stride8", "out_stride", "sf_stride",
                    "sf_mode", "round_sf", "clamp_min")
E5M6_DECODE_ARGS = ("x", "out", "sf", "sf_bytes", "num_tokens", "groups", "x_stride", "out_stride8", "sf_stride",
                    "sf_mode")
E5M6_SF_FP32, E5M6_SF_UE8M0 = 0, 1  # the kernels' runtime scale-storage selector (sf_mode)

E5M6 = OpContract(
    op="e5m6",
    kernel="kernels.quant.e5m6",
    params=(Param("direction", ("encode", "decode")), Param("dtype", PLAIN_INPUTS)),
    # encode (per_token_cast_to_e5m6) and decode (cast_back_e5m6) are two PrimFuncs with their own strides
    args=lambda p: E5M6_ENCODE_ARGS if p["direction"] == "encode" else E5M6_DECODE_ARGS,
    doc="v1's E5M6: one scale per token, 12-bit codes packed eight per three words (docs/SPEC.md §2.2).",
)

CONTRACTS = (PER_TOKEN_CAST, CAST, CAST_BACK, PER_BLOCK_CAST_LOSSLESS, TRANSPOSE_WEIGHT_SF, PER_BLOCK_CAST, E5M6)
