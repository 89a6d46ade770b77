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
)

CONTRACTS = (TOPK_GATE,)
