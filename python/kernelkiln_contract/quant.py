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
)

CONTRACTS = (PER_TOKEN_CAST,)
