"""engram_gate_fwd: the Engram gate forward (spec: the contract's doc, kernelkiln_contract.engram_gate).

Thread level, because the bits are decided by which lane sums which elements in which order: one warp per CTA,
grid [hc, P]; the CTA of (head h, block b) takes the contiguous tokens [b·ceil(T/P), (b+1)·ceil(T/P)). Per token,
lane l reads its 8-element vectors c·256 + 8l (16-byte loads of x and k, 32 bytes of w), sums the squares and the
weighted dot serially with explicit fma (c-major, then the 8 elements), reduces over the warp with the xor
butterfly, and writes ``fma(g, v, x)`` rounded to bf16 over a second pass (x is read again: it is still in L1).

H is a runtime value: the groups are walked in chunks of UNROLL whose loads are all issued first (a group past the
end reads the last group again and its terms are not added), which keeps several loads in flight per lane without
a compile-time H. No shared memory.
"""
from kernelkiln_contract.engram_gate import GATE_FWD_THREADS as THREADS
from kernelkiln_contract.engram_gate import GATE_FWD_UNROLL as UNROLL

PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
    "tl.disable_thread_storage_sync": True,
}

VEC = 8  # elements per lane and group


def build(p, arch):
    import tilelang.language as T

    del arch
    hc = p["hc_mult"]
    save = bool(p["save_for_backward"])
    has_mask = bool(p["has_image_token_mask"])
    inplace = bool(p["inplace"])
    x_n, kv_n, w_n, m_n, o_n, s_n = T.dynamic("x_n, kv_n, w_n, m_n, o_n, s_n")

    def fma(a, b, c):
        return T.call_extern("float32", "__fmaf_rn", a, b, c)

    def mul(a, b):
        return T.call_extern("float32", "__fmul_rn", a, b)

    @T.prim_func
    def engram_gate_fwd(
        hidden_states: T.Tensor((x_n,), "bfloat16"),  # [T, hc, H]
        kv: T.Tensor((kv_n,), "bfloat16"),  # [T, hc + 1, H]
        weight_fused: T.Tensor((w_n,), "float32"),  # [hc, H]
        image_token_mask: T.Tensor((m_n,), "bool"),  # [T]; unused without a mask
        output: T.Tensor((o_n,), "bfloat16"),  # [T, hc, H]; hidden_states itself when in place
        dot_out: T.Tensor((s_n,), "float32"),  # [T, hc] each; unused without save_for_backward
        gate_score: T.Tensor((s_n,), "float32"),
        rstd_x: T.Tensor((s_n,), "float32"),
        rstd_k: T.Tensor((s_n,), "float32"),
        num_tokens: T.int32,
        num_groups: T.int32,  # H / 256
        eps: T.float32,
        clamp_value: T.float32,
        scalar: T.float32,  # fp32(H^-1/2)
        num_blocks: T.int32,  # P
    ):
        with T.Kernel(hc, num_blocks, threads=THREADS) as (pid_h, pid_b):
            lane = T.get_thread_binding()
            xb = T.alloc_local((UNROLL * VEC,), "bfloat16")
            kb = T.alloc_local((UNROLL * VEC,), "bfloat16")
            wl = T.alloc_local((UNROLL * VEC,), "float32")
            vb = T.alloc_local((VEC,), "bfloat16")
            xo = T.alloc_local((VEC,), "bfloat16")
            ob = T.alloc_local((VEC,), "bfloat16")
            sx = T.alloc_var("float32")
            sk = T.alloc_var("float32")
            sd = T.alloc_var("float32")
            rx = T.alloc_var("float32")
            rk = T.alloc_var("float32")
            g = T.alloc_var("float32")
            masked = T.alloc_var("bool")
            T.pdl_sync()
            row_vecs = num_groups * (THREADS)  # 8-element vectors per row of H
            hidden = T.Cast("float32", num_groups * (THREADS * VEC))
            per_block = T.truncdiv(num_tokens + num_blocks - 1, num_blocks)
            t_start = T.min(per_block * pid_b, num_tokens)
            t_end = T.min(per_block * (pid_b + 1), num_tokens)
            w_row = T.Cast("int64", pid_h) * row_vecs
            for t in T.serial(t_start, t_end):
                t64 = T.Cast("int64", t)
                x_row = (t64 * hc + pid_h) * row_vecs  # in vectors
                k_row = (t64 * (hc + 1) + pid_h) * row_vecs
                v_row = (t64 * (hc + 1) + hc) * row_vecs
                masked = False
                if has_mask:
                    masked = image_token_mask[t]
                if masked:
                    if not inplace:
                        for c in T.serial(num_groups):
                            for j in T.vectorized(VEC):
                                xo[j] = hidden_states[(x_row + c * THREADS + lane) * VEC + j]
                            for j in T.vectorized(VEC):
                                output[(x_row + c * THREADS + lane) * VEC + j] = xo[j]
                else:
                    sx = T.float32(0)
                    sk = T.float32(0)
                    sd = T.float32(0)
                    for c0 in T.serial(T.truncdiv(num_groups + (UNROLL - 1), UNROLL)):
                        for u in T.unroll(UNROLL):
                            # a group past the end reloads the last one; its terms are skipped below
                            cc = T.min(c0 * UNROLL + u, num_groups - 1) * THREADS + lane
                            for j in T.vectorized(VEC):
                                xb[u * VEC + j] = hidden_states[(x_row + cc) * VEC + j]
                            for j in T.vectorized(VEC):
                                kb[u * VEC + j] = kv[(k_row + cc) * VEC + j]
                            for j in T.vectorized(VEC):
                                wl[u * VEC + j] = weight_fused[(w_row + cc) * VEC + j]
                        for u in T.unroll(UNROLL):
                            if c0 * UNROLL + u < num_groups:
                                for j in T.unroll(VEC):
                                    xf = T.Cast("float32", xb[u * VEC + j])
                                    kf = T.Cast("float32", kb[u * VEC + j])
                                    sx = fma(xf, xf, sx)
                                    sk = fma(kf, kf, sk)
                                    sd = fma(mul(xf, wl[u * VEC + j]), kf, sd)
                    sk = T.warp_reduce_sum(sk)
                    sx = T.warp_reduce_sum(sx)
                    sd = T.warp_reduce_sum(sd)
                    rx = T.rsqrt(sx / hidden + eps)
                    rk = T.rsqrt(sk / hidden + eps)
                    if save:
                        if lane == 0:
                            dot_out[t64 * hc + pid_h] = sd
                            rstd_x[t64 * hc + pid_h] = rx
                            rstd_k[t64 * hc + pid_h] = rk
                    d = mul(mul(mul(sd, rx), rk), scalar)
                    g = T.sigmoid(T.copysign(T.sqrt(T.clamp(T.abs(d), clamp_value, T.infinity("float32"))), d))
                    if save:
                        if lane == 0:
                            gate_score[t64 * hc + pid_h] = g
                    for c in T.serial(num_groups):
                        for j in T.vectorized(VEC):
                            xo[j] = hidden_states[(x_row + c * THREADS + lane) * VEC + j]
                        for j in T.vectorized(VEC):
                            vb[j] = kv[(v_row + c * THREADS + lane) * VEC + j]
                        for j in T.unroll(VEC):
                            ob[j] = T.Cast("bfloat16", fma(g, T.Cast("float32", vb[j]), T.Cast("float32", xo[j])))
                        for j in T.vectorized(VEC):
                            output[(x_row + c * THREADS + lane) * VEC + j] = ob[j]
            T.pdl_trigger()

    return engram_gate_fwd
