"""engram_gate_bwd: the Engram gate backward, hc = 4 (spec: the contract's doc, kernelkiln_contract.engram_gate).

Thread level, because the bits of G = Σ go·v and of the weight-gradient partials are decided by which lane sums
which elements in which order. One CTA of 1024 threads per partial row p (P = the SM count at run time), contiguous
tokens per CTA. Per token:

1. G, by the first 256 threads in the peer's ownership: warp w of head h = warp // 2 (w = warp % 2), lane l owns the
   4-element vectors c·256 + 128w + 4l of its head's row; each lane sums go·v over its vectors (serial fma,
   c-major), xor butterfly, lane 0 stores the warp's sum in shared memory, G = S_0 + S_1 after the barrier.
2. dg and the two coefficients from the saved raw dot, g, rx, rk; grad_v by every thread over 4-element vectors
   (the fma chain over the 4 heads; any mapping gives the same bits).
3. grad_x, grad_k elementwise and the weight-gradient term fma(dg·x, k, acc), by all 1024 threads: 256 per head,
   thread j owning the vectors c·256 + j of its head's row. Which thread owns an element does not change its bits
   (its fma chain runs over the CTA's tokens in order either way), so this phase runs on 32 warps per SM while
   phase 1 keeps the peer's 8. The sums live in shared memory (the CTA's partial row, each thread reading and
   writing only its own elements, so no barrier), for H <= 7168; beyond, in the thread's own elements of
   grad_w_partial (read, fma, write per token, same order). Register sums capped the earlier kernel at 512 threads
   (128 registers; 768 and 1024 threads spilled at 80 / 64), and 16 warps per SM left it latency-bound
   (benchmarks/results/TARGETS.md).

Staging: the first STAGED groups of 256 of the token's grad_out rows and of its v row are copied into shared memory
with cp.async (8 bytes per vector, by thread id) one token ahead, into the other of two slots, right after the
token's second barrier, so the copies of token t+1 fly while token t computes phases 2 and 3. Per token: wait for
the own copies, barrier (everyone's copies have landed), phase 1, barrier (the sums), issue the next token's
copies, phases 2 and 3 (which read grad_out from shared memory too). A token whose copies were not issued one ahead
(the first, or the one after an image token) issues its own behind a barrier (the slot may still be read by the
token two back). Groups past STAGED come from global memory, same order, same bits. x, k and w are read from
global memory (w's rereads hit L1); H is a runtime value.
"""
from kernelkiln_contract.engram_gate import GATE_BWD_ACC_GROUPS as ACC_GROUPS
from kernelkiln_contract.engram_gate import GATE_BWD_SHARED_BYTES
from kernelkiln_contract.engram_gate import GATE_BWD_STAGED_GROUPS as STAGED
from kernelkiln_contract.engram_gate import GATE_BWD_THREADS as THREADS
from kernelkiln_contract.engram_gate import GATE_BWD_UNROLL as UNROLL

PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
    "tl.disable_thread_storage_sync": True,  # the barriers are placed by hand
}

VEC = 4  # elements per vector
WARPS_PER_HEAD = 2  # phase 1
LANES_PER_HEAD = 64  # phase 1: 4-element vectors per group of a head: 64 · 4 = 256
P1_THREADS = 4 * WARPS_PER_HEAD * 32  # the threads of phase 1 (hc = 4)
STAGED_VECS = STAGED * LANES_PER_HEAD  # staged 4-element vectors per row
PHASE3_UNROLL = 2  # phase-3 steps whose loads are issued together


def build(p, arch):
    import tilelang.language as T

    del arch
    hc = p["hc_mult"]
    has_mask = bool(p["has_image_token_mask"])
    assert hc * WARPS_PER_HEAD * 32 == P1_THREADS and THREADS % hc == 0
    span = THREADS // hc  # phase 3: threads per head = vectors per step
    acc_vecs = ACC_GROUPS * LANES_PER_HEAD  # 4-element vectors of a head's row summed in shared memory
    slot_elems = (hc + 1) * STAGED_VECS * VEC  # one slot: hc grad_out rows, then the v row
    assert 2 * 2 * slot_elems + 4 * hc * acc_vecs * VEC == GATE_BWD_SHARED_BYTES
    n_x, n_kv, n_w, n_s, n_m, n_p = T.dynamic("n_x, n_kv, n_w, n_s, n_m, n_p")

    def fma(a, b, c):
        return T.call_extern("float32", "__fmaf_rn", a, b, c)

    def mul(a, b):
        return T.call_extern("float32", "__fmul_rn", a, b)

    def f32(v):
        return T.Cast("float32", v)

    def cp8(dst, src):  # one 4-element bf16 vector, cp.async.ca (dst, src: BufferLoads of the first element)
        return T.ptx_cp_async(T.access_ptr(dst, "w", VEC), T.access_ptr(src, "r", VEC), VEC)

    @T.macro
    def issue_token(stage, grad_out, kv, tq, b, tid, n_staged, row_vecs):
        """Token tq's staged vectors (every head's grad_out row, then v) into slot b, by thread id."""
        tq64 = T.Cast("int64", tq)
        for hh in T.unroll(hc + 1):
            src_row = T.if_then_else(hh < hc, tq64 * hc + hh, tq64 * (hc + 1) + hc) * row_vecs
            for q in T.serial(T.truncdiv(n_staged + (THREADS - 1), THREADS)):
                qv = q * THREADS + tid
                if qv < n_staged:
                    if hh < hc:
                        cp8(stage[b * slot_elems + (hh * STAGED_VECS + qv) * VEC], grad_out[(src_row + qv) * VEC])
                    else:
                        cp8(stage[b * slot_elems + (hh * STAGED_VECS + qv) * VEC], kv[(src_row + qv) * VEC])
        T.ptx_commit_group()

    @T.prim_func
    def engram_gate_bwd(
        grad_out: T.Tensor((n_x,), "bfloat16"),  # [T, hc, H]
        hidden_states: T.Tensor((n_x,), "bfloat16"),  # [T, hc, H]
        kv: T.Tensor((n_kv,), "bfloat16"),  # [T, hc + 1, H]
        weight_fused: T.Tensor((n_w,), "float32"),  # [hc, H]
        dot_in: T.Tensor((n_s,), "float32"),  # [T, hc] each
        gate_in: T.Tensor((n_s,), "float32"),
        rstd_x_in: T.Tensor((n_s,), "float32"),
        rstd_k_in: T.Tensor((n_s,), "float32"),
        image_token_mask: T.Tensor((n_m,), "bool"),  # [T]; unused without a mask
        grad_x: T.Tensor((n_x,), "bfloat16"),
        grad_kv: T.Tensor((n_kv,), "bfloat16"),
        grad_w_partial: T.Tensor((n_p,), "float32"),  # [P, hc, H]
        num_tokens: T.int32,
        num_groups: T.int32,  # H / 256
        scalar: T.float32,  # fp32(H^-1/2)
        clamp_value: T.float32,
        num_partials: T.int32,  # P, the grid
    ):
        with T.Kernel(num_partials, threads=THREADS) as pid:
            tid = T.get_thread_binding()
            accs = T.alloc_shared((hc * acc_vecs * VEC,), "float32")  # the CTA's partial row; each thread its own
            gob = T.alloc_local((UNROLL * VEC,), "bfloat16")
            vb = T.alloc_local((UNROLL * VEC,), "bfloat16")
            go4 = T.alloc_local((VEC,), "bfloat16")
            x4 = T.alloc_local((VEC,), "bfloat16")
            k4 = T.alloc_local((VEC,), "bfloat16")
            w4 = T.alloc_local((VEC,), "float32")
            p4 = T.alloc_local((VEC,), "float32")
            o4 = T.alloc_local((VEC,), "bfloat16")
            q4 = T.alloc_local((VEC,), "bfloat16")
            z4 = T.alloc_local((VEC,), "bfloat16")
            gh = T.alloc_local((hc,), "float32")
            gv = T.alloc_local((VEC,), "float32")
            sums = T.alloc_shared((2 * hc * WARPS_PER_HEAD,), "float32")
            stage = T.alloc_shared((2 * slot_elems,), "bfloat16")  # two slots of staged grad_out and v
            s = T.alloc_var("float32")
            dg = T.alloc_var("float32")
            cx = T.alloc_var("float32")
            ck = T.alloc_var("float32")
            masked = T.alloc_var("bool")
            issued = T.alloc_var("bool")  # this token's staged vectors were issued by the previous token
            nxt = T.alloc_var("bool")
            T.pdl_sync()
            warp = tid // 32
            lane = tid % 32
            head1 = warp // WARPS_PER_HEAD  # phase 1 (tid < P1_THREADS)
            half = warp % WARPS_PER_HEAD
            slot1 = half * 32 + lane  # the thread's 4-element vector within a group of its head
            head = tid // span  # phases 2 and 3
            own = tid % span  # the thread's vector within a step of its head's row
            row_vecs = num_groups * LANES_PER_HEAD  # 4-element vectors per row of H
            n_staged = T.min(num_groups, STAGED) * LANES_PER_HEAD
            steps = T.truncdiv(row_vecs + (span - 1), span)
            hidden = f32(num_groups * (LANES_PER_HEAD * VEC))
            w_row = T.Cast("int64", head) * row_vecs
            p_row = (T.Cast("int64", pid) * hc + head) * row_vecs
            per_block = T.truncdiv(num_tokens + num_partials - 1, num_partials)
            t_start = T.min(per_block * pid, num_tokens)
            t_end = T.min(per_block * (pid + 1), num_tokens)
            for j in T.unroll(VEC):
                z4[j] = T.Cast("bfloat16", T.float32(0))
            for c in T.serial(steps):
                cc = c * span + own
                if cc < row_vecs:
                    if cc < acc_vecs:
                        for j in T.vectorized(VEC):
                            accs[(head * acc_vecs + cc) * VEC + j] = T.float32(0)
                    else:
                        for j in T.vectorized(VEC):
                            grad_w_partial[(p_row + cc) * VEC + j] = T.float32(0)
            issued = False
            for t in T.serial(t_start, t_end):
                t64 = T.Cast("int64", t)
                b = t % 2
                x_row = (t64 * hc + head) * row_vecs  # in vectors, for go, x and grad_x (phase 3)
                k_row = (t64 * (hc + 1) + head) * row_vecs
                v_row = (t64 * (hc + 1) + hc) * row_vecs
                masked = False
                if has_mask:
                    masked = image_token_mask[t]
                if masked:
                    for c in T.serial(steps):
                        if c * span + own < row_vecs:
                            for j in T.vectorized(VEC):
                                go4[j] = grad_out[(x_row + c * span + own) * VEC + j]
                            for j in T.vectorized(VEC):
                                grad_x[(x_row + c * span + own) * VEC + j] = go4[j]
                            for j in T.vectorized(VEC):
                                grad_kv[(k_row + c * span + own) * VEC + j] = z4[j]
                    for q0 in T.serial(T.truncdiv(row_vecs + (THREADS - 1), THREADS)):
                        if q0 * THREADS + tid < row_vecs:
                            for j in T.vectorized(VEC):
                                grad_kv[(v_row + q0 * THREADS + tid) * VEC + j] = z4[j]
                else:
                    if not issued:
                        T.sync_threads()  # the slot may still be read by token t - 2
                        issue_token(stage, grad_out, kv, t, b, tid, n_staged, row_vecs)
                    T.ptx_wait_group(0)
                    T.sync_threads()  # every thread's copies of this token have landed
                    # 1. G = Σ go·v in the peer's lane order: staged groups from shared memory, the rest from global
                    if tid < P1_THREADS:
                        x1_row = (t64 * hc + head1) * row_vecs
                        s = T.float32(0)
                        for c in T.serial(T.min(num_groups, STAGED)):
                            cv = c * LANES_PER_HEAD + slot1
                            for j in T.vectorized(VEC):
                                gob[j] = stage[b * slot_elems + (head1 * STAGED_VECS + cv) * VEC + j]
                            for j in T.vectorized(VEC):
                                vb[j] = stage[b * slot_elems + (hc * STAGED_VECS + cv) * VEC + j]
                            for j in T.unroll(VEC):
                                s = fma(f32(gob[j]), f32(vb[j]), s)
                        for c0 in T.serial(T.truncdiv(T.max(num_groups - STAGED, 0) + (UNROLL - 1), UNROLL)):
                            for u in T.unroll(UNROLL):
                                cc = T.min(STAGED + c0 * UNROLL + u, num_groups - 1) * LANES_PER_HEAD + slot1
                                for j in T.vectorized(VEC):
                                    gob[u * VEC + j] = grad_out[(x1_row + cc) * VEC + j]
                                for j in T.vectorized(VEC):
                                    vb[u * VEC + j] = kv[(v_row + cc) * VEC + j]
                            for u in T.unroll(UNROLL):
                                if STAGED + c0 * UNROLL + u < num_groups:
                                    for j in T.unroll(VEC):
                                        s = fma(f32(gob[u * VEC + j]), f32(vb[u * VEC + j]), s)
                        s = T.warp_reduce_sum(s)
                        if lane == 0:
                            sums[((t % 2) * hc + head1) * WARPS_PER_HEAD + half] = s
                    T.sync_threads()
                    s = sums[((t % 2) * hc + head) * WARPS_PER_HEAD] + sums[((t % 2) * hc + head) * WARPS_PER_HEAD + 1]
                    # the next token's copies fly during this token's phases 2 and 3 (its slot was last read by
                    # token t - 1, which every thread finished before the barrier above)
                    nxt = t + 1 < t_end
                    if has_mask:
                        if nxt:
                            nxt = not image_token_mask[t + 1]
                    if nxt:
                        issue_token(stage, grad_out, kv, t + 1, 1 - b, tid, n_staged, row_vecs)
                    issued = nxt
                    # 2. the gate derivative and the normalization coefficients
                    raw = dot_in[t64 * hc + head]
                    g = gate_in[t64 * hc + head]
                    rx = rstd_x_in[t64 * hc + head]
                    rk = rstd_k_in[t64 * hc + head]
                    dg = T.if_then_else(
                        mul(mul(mul(T.abs(raw), scalar), rx), rk) < clamp_value,
                        T.float32(0),
                        mul(mul(mul(mul(s, g), T.float32(1) - g), T.float32(0.5)),
                            T.sqrt(mul(mul(scalar, rx), rk) / T.abs(raw))))
                    cx = mul(mul(raw, rx), rx) / hidden
                    ck = mul(mul(raw, rk), rk) / hidden
                    # grad_v = Σ_h go_h·g_h, heads in order, from +0
                    for hh in T.unroll(hc):
                        gh[hh] = gate_in[t64 * hc + hh]
                    for q0 in T.serial(T.truncdiv(row_vecs + (THREADS - 1), THREADS)):
                        qv = q0 * THREADS + tid
                        if qv < row_vecs:
                            for j in T.unroll(VEC):
                                gv[j] = T.float32(0)
                            for hh in T.unroll(hc):
                                if qv < n_staged:
                                    for j in T.vectorized(VEC):
                                        go4[j] = stage[b * slot_elems + (hh * STAGED_VECS + qv) * VEC + j]
                                else:
                                    for j in T.vectorized(VEC):
                                        go4[j] = grad_out[((t64 * hc + hh) * row_vecs + qv) * VEC + j]
                                for j in T.unroll(VEC):
                                    gv[j] = fma(f32(go4[j]), gh[hh], gv[j])
                            for j in T.unroll(VEC):
                                o4[j] = T.Cast("bfloat16", gv[j])
                            for j in T.vectorized(VEC):
                                grad_kv[(v_row + qv) * VEC + j] = o4[j]
                    # 3. grad_x, grad_k and the weight-gradient terms, PHASE3_UNROLL steps at a time
                    for c0 in T.serial(T.truncdiv(steps + (PHASE3_UNROLL - 1), PHASE3_UNROLL)):
                        for u in T.unroll(PHASE3_UNROLL):
                            cc = (c0 * PHASE3_UNROLL + u) * span + own
                            if cc < row_vecs:
                                if cc < n_staged:
                                    for j in T.vectorized(VEC):
                                        go4[j] = stage[b * slot_elems + (head * STAGED_VECS + cc) * VEC + j]
                                else:
                                    for j in T.vectorized(VEC):
                                        go4[j] = grad_out[(x_row + cc) * VEC + j]
                                for j in T.vectorized(VEC):
                                    x4[j] = hidden_states[(x_row + cc) * VEC + j]
                                for j in T.vectorized(VEC):
                                    k4[j] = kv[(k_row + cc) * VEC + j]
                                for j in T.vectorized(VEC):
                                    w4[j] = weight_fused[(w_row + cc) * VEC + j]
                                if cc < acc_vecs:
                                    for j in T.vectorized(VEC):
                                        p4[j] = accs[(head * acc_vecs + cc) * VEC + j]
                                else:
                                    for j in T.vectorized(VEC):
                                        p4[j] = grad_w_partial[(p_row + cc) * VEC + j]
                                for j in T.unroll(VEC):
                                    xf = f32(x4[j])
                                    kf = f32(k4[j])
                                    o4[j] = T.Cast("bfloat16", fma(fma(kf, w4[j], -mul(xf, cx)), dg, f32(go4[j])))
                                    q4[j] = T.Cast("bfloat16", mul(fma(xf, w4[j], -mul(kf, ck)), dg))
                                    p4[j] = fma(mul(dg, xf), kf, p4[j])
                                for j in T.vectorized(VEC):
                                    grad_x[(x_row + cc) * VEC + j] = o4[j]
                                for j in T.vectorized(VEC):
                                    grad_kv[(k_row + cc) * VEC + j] = q4[j]
                                if cc < acc_vecs:
                                    for j in T.vectorized(VEC):
                                        accs[(head * acc_vecs + cc) * VEC + j] = p4[j]
                                else:
                                    for j in T.vectorized(VEC):
                                        grad_w_partial[(p_row + cc) * VEC + j] = p4[j]
            for c in T.serial(T.min(steps, T.truncdiv(acc_vecs + (span - 1), span))):
                cc = c * span + own
                if cc < T.min(row_vecs, acc_vecs):
                    for j in T.vectorized(VEC):
                        grad_w_partial[(p_row + cc) * VEC + j] = accs[(head * acc_vecs + cc) * VEC + j]
            T.pdl_trigger()

    return engram_gate_bwd
