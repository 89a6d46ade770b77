"""moe_topk_gate_backward: the gradient of the 2.1 sqrt-softplus router w.r.t. the logits (docs/SPEC.md §3.1).

One warp per token, lane L owning experts [L*EPL, L*EPL + EPL) as in the forward (routing.py):

* lane k < K loads (idx_k, w_k, g_k) and, for a valid idx_k (in [0, E)), fetches s_k from the owner
  lane's registers;
  <g, w> and D = sum s_k + 1e-20 are xor-butterfly sums (16, 8, 4, 2, 1) over the lanes.
* lane k adds (rsf*g_k - <g, w>)/D to its expert in the warp's shared-memory row in round k (k order:
  duplicates under fixed routing accumulate deterministically; no atomics); each lane reads its
  experts' route terms back.
* tokens in ``mask`` (AUX flag) add (h - <h, s>/S)/S with S = sum of the row's scores and h the row
  t // tokens_per_seq of grad_scores_sum; both sums are butterflies over the lanes.
* out = ds/dx * route, ds/dx recovered from s as the reference's sqrt_softplus_grad (u < 1: the
  polynomial; else 0.5 (1 - exp(-u)) / s with __expf and __fdividef: fast-math, as the peer's kernel).

The result is deterministic (fixed summation order) but not bit-identical to the torch reference, whose
sums run in torch's order; the tests compare within 1e-5 relative. Compile-time: EPL only.
"""
from kernels.common.passes import THREAD_LEVEL
from kernels.common.routing import EPS, WARPS_PER_CTA, lane_row_loader

# Declared in kernelkiln_contract.moe (MOE_TOPK_GATE_BACKWARD): experts per lane (ceil(E / 32)), and the
# launch-argument names below, which the build checks against this PrimFunc.
AUX, VEC4 = 1, 2  # flags
# The shared row is private to its warp: __syncwarp orders it, not TileLang's CTA-wide barriers.
PASS_CONFIGS = {**THREAD_LEVEL, "tl.disable_thread_storage_sync": True}
# sqrt_softplus_grad's polynomial for u = s*s < 1 (highest degree first), as python/kernelkiln/torch/moe_router.py
POLY = (0.000129130945, -0.00130112655, 0.00827621203, -0.041647464, 0.166663632, -0.499999821)


def build(p, arch):
    import tilelang.language as T

    del arch
    epl = p["experts_per_lane"]
    sc_numel, tk_numel, t_numel, h_numel = T.dynamic("sc_numel, tk_numel, t_numel, h_numel")

    load_row = lane_row_loader(T, epl)

    def sync_warp():
        T.evaluate(T.call_extern("handle", "__syncwarp"))

    @T.prim_func
    def moe_topk_gate_backward(
        scores: T.Tensor((sc_numel,), "float32"),  # [T, E] contiguous (the forward's scores)
        topk_idx: T.Tensor((tk_numel,), "int64"),  # [T, K] contiguous
        topk_weights: T.Tensor((tk_numel,), "float32"),
        grad_topk_weights: T.Tensor((tk_numel,), "float32"),
        mask: T.Tensor((t_numel,), "uint8"),
        grad_scores_sum: T.Tensor((h_numel,), "float32"),  # [Q, E] contiguous
        out: T.Tensor((sc_numel,), "float32"),  # [T, E] contiguous
        num_tokens: T.int32,
        num_experts: T.int32,
        experts_div4: T.int32,  # E / 4 (the VEC4 addressing: provably 16-byte aligned)
        num_topk: T.int32,
        routed_scaling_factor: T.float32,
        tokens_per_seq: T.int32,  # T / Q
        flags: T.int32,
    ):
        with T.Kernel(T.ceildiv(num_tokens, WARPS_PER_CTA), threads=32 * WARPS_PER_CTA) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            token = bx * WARPS_PER_CTA + tx // 32
            base = lane * epl
            s = T.alloc_local((epl,), "float32")
            route = T.alloc_local((epl,), "float32")
            h = T.alloc_local((epl,), "float32")
            row_buf = T.alloc_shared((WARPS_PER_CTA * 32 * epl,), "float32")  # one expert row per warp
            warp_base = (tx // 32) * (32 * epl)
            my_e = T.alloc_var("int32")
            e64 = T.alloc_var("int64")
            g = T.alloc_var("float32")
            gw = T.alloc_var("float32")
            picked = T.alloc_var("float32")
            dot = T.alloc_var("float32")
            den = T.alloc_var("float32")
            term = T.alloc_var("float32")
            ssum = T.alloc_var("float32")
            hs = T.alloc_var("float32")
            row = T.Cast("int64", token) * num_experts
            row4 = T.Cast("int64", token) * experts_div4 + lane * (epl // 4)
            k_row = T.Cast("int64", token) * num_topk
            T.pdl_sync()
            if token < num_tokens:
                vec4 = epl % 4 == 0 and T.bitwise_and(flags, VEC4) != 0
                load_row(s, scores, token, lane, num_experts, experts_div4, vec4, T.float32(0))
                my_e = -1
                g = T.float32(0)
                gw = T.float32(0)
                picked = T.float32(0)
                if lane < num_topk:
                    e64 = topk_idx[k_row + lane]
                    if e64 >= T.int64(0) and e64 < T.Cast("int64", num_experts):
                        my_e = T.Cast("int32", e64)
                        g = grad_topk_weights[k_row + lane]
                    gw = g * topk_weights[k_row + lane]
                # s of the own expert from its owner lane's registers (no dependent global load)
                owner = T.max(my_e, 0) // epl
                slot = T.max(my_e, 0) - owner * epl
                for j in T.unroll(epl):
                    v = T.shfl_sync(s[j], owner)
                    if slot == j and my_e >= 0:
                        picked = v
                dot = gw
                den = picked
                for r in T.unroll(5):  # xor butterflies: every lane ends with the sums
                    dot = dot + T.shfl_xor(dot, 16 >> r)
                    den = den + T.shfl_xor(den, 16 >> r)
                den = den + T.float32(EPS)
                term = (routed_scaling_factor * g - dot) / den
                # Scatter through the warp's shared row: lane k adds its term in round k (k order, so
                # duplicates accumulate deterministically); then every lane reads its own experts back.
                for j in T.unroll(epl):
                    row_buf[warp_base + base + j] = T.float32(0)
                sync_warp()
                for k in T.serial(num_topk):
                    if lane == k and my_e >= 0:
                        row_buf[warp_base + my_e] = row_buf[warp_base + my_e] + term
                    sync_warp()
                for j in T.unroll(epl):
                    route[j] = row_buf[warp_base + base + j]
                if T.bitwise_and(flags, AUX) != 0 and mask[token] != T.uint8(0):
                    h_row = T.Cast("int64", token // tokens_per_seq) * num_experts
                    ssum = T.float32(0)
                    hs = T.float32(0)
                    for j in T.unroll(epl):
                        h[j] = T.float32(0)
                        if base + j < num_experts:
                            h[j] = grad_scores_sum[h_row + base + j]
                        ssum = ssum + s[j]
                        hs = hs + h[j] * s[j]
                    for r in T.unroll(5):
                        ssum = ssum + T.shfl_xor(ssum, 16 >> r)
                        hs = hs + T.shfl_xor(hs, 16 >> r)
                    inv = T.float32(1) / ssum
                    mean = hs * inv
                    for j in T.unroll(epl):
                        route[j] = route[j] + (h[j] - mean) * inv
                for j in T.unroll(epl):
                    u = s[j] * s[j]
                    half = T.float32(0.5) * s[j]
                    q = T.float32(POLY[0])
                    for c in POLY[1:]:
                        q = q * u + T.float32(c)
                    small = (u * q) * half + half
                    # fast-math, as the peer's kernel (tests/moe/test_aux_ops_gpu.py: within 1e-5 relative)
                    large = T.float32(0.5) * T.call_extern(
                        "float32", "__fdividef", T.float32(1) - T.call_extern("float32", "__expf", -u), s[j])
                    route[j] = T.if_then_else(u < T.float32(1), small, large) * route[j]
                if vec4:
                    for c in T.unroll(epl // 4):
                        if base + c * 4 < num_experts:
                            for i in T.vectorized(4):
                                out[(row4 + c) * 4 + i] = route[c * 4 + i]
                else:
                    for j in T.unroll(epl):
                        if base + j < num_experts:
                            out[row + base + j] = route[j]
            T.pdl_trigger()

    return moe_topk_gate_backward
