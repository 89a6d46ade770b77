"""engram_gate_bwd: the Engram gate backward, hc = 4 (spec: the contract's doc, kernelkiln_contract.engram_gate).

Thread level, because the bits of G = Σ go·v and of the weight-gradient partials are decided by which lane sums
which elements in which order. One CTA of 256 threads per partial row p (P = the SM count at run time), contiguous
tokens per CTA, two warps per head, thread (head h, o = tid % 64). The memory parallelism comes from cp.async tiles
in shared memory, not from threads: the earlier 1024-thread kernel issued plain loads and stayed latency-bound, and
this one is faster at every model shape, with and without image tokens (H200 store A/Bs against 8d942fa:
benchmarks/results/2026-12-04-19564b7c82/NOTE.md).

Per token t (G = H / 256 groups; the first STAGED = 32 groups, H <= 8192, staged in shared memory):

1. G in the peer's lane order: thread o owns the 4-element vectors c·64 + o of its head's row (c-major serial fma,
   xor butterfly, lane 0 stores the warp's sum; barrier; G = S_0 + S_1). grad_out arrives in two parts of
   own-vector copies, [0, G0) (the groups token t - 1's last tile does not read, issued before that tile) and
   [G0, Gs) (issued after it, with this token's first AHEAD x/k/w tiles behind it). Wait for the first part, sum
   it, wait for the second (the tiles may still fly), sum it, then the groups past Gs from global memory.
2. Issue the next token's v (its old value is dead after the barrier); dg and the coefficients; grad_v by every
   thread over 4-element vectors from the staged grad_out of all heads (the fma chain over the heads; any mapping
   gives the same bits).
3. x, k and w in tiles of TILE groups in SLOTS slots, AHEAD tiles in flight. This phase is elementwise (and each
   weight-gradient sum is a chain over the tokens), so it owns wider vectors: 8 elements c2·512 + 8·o, copied by
   their own thread with 16-byte cp.async (not through L1: 8-byte copies allocate L1 lines, and A/Bs of the shared
   memory size showed the 8-byte kernel limited by the L1 that remains). Per element grad_x, grad_k and
   fma(dg·x, k, acc). The sums of the first REG = 32 groups live in registers (tiles and vectors unrolled, so the
   indices are constants; a full tile has no per-vector tests), those beyond in the thread's own elements of
   grad_w_partial (read, fma, write per token; same order). Before the last tile: wait for everything, barrier
   (v has landed for every thread; phases 2 and 3 are done reading grad_out except the last tile's groups), then
   issue the next token's first part. After the last tile: barrier, the second part and the first tiles (the
   slots are the thread's own, so they need no barrier; issued here rather than in phase 2, the tiles land during
   phases 1 and 2: 3.6 % at H 4096, 6 % at H 2560, store A/B "early2" in benchmarks/results/2026-12-04-19564b7c82/).

Image tokens copy grad_out to grad_x and zero grad_kv from global memory, 16-byte vectors, four loads in flight per
thread, while the next token's v, grad_out and first tiles fly. H is a runtime value, like T, s, clamp_value and P.
"""
from kernelkiln_contract.engram_gate import GATE_BWD_REG_GROUPS as REG
from kernelkiln_contract.engram_gate import GATE_BWD_SHARED_BYTES
from kernelkiln_contract.engram_gate import GATE_BWD_STAGED_GROUPS as STAGED
from kernelkiln_contract.engram_gate import GATE_BWD_THREADS as THREADS
from kernelkiln_contract.engram_gate import GATE_BWD_TILE_GROUPS as TILE
from kernelkiln_contract.engram_gate import GATE_BWD_TILE_SLOTS as SLOTS

PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
    "tl.disable_thread_storage_sync": True,  # the barriers are placed by hand
}

VEC = 4  # elements per vector (phase 1, grad_v)
PVEC = 8  # elements per vector of phase 3 (one 16-byte bf16 copy)
AHEAD = SLOTS - 1  # x/k/w tiles in flight ahead of the one computed
AFTER_V = 2 + AHEAD  # commit groups issue_token puts after v: the two grad_out parts and the first tiles
WARPS_PER_HEAD = 2
COPY_BATCH = 4  # an image token's 8-element vectors in flight per thread
LANES_PER_HEAD = 64  # 4-element vectors per group of a head: 64 · 4 = 256


def build(p, arch):
    import tilelang.language as T

    del arch
    hc = p["hc_mult"]
    has_mask = bool(p["has_image_token_mask"])
    assert hc * WARPS_PER_HEAD * 32 == THREADS and REG % TILE == 0 and TILE % 2 == 0 and STAGED % 2 == 0
    go_elems = hc * STAGED * LANES_PER_HEAD * VEC  # the staged grad_out rows of all heads
    v_elems = STAGED * LANES_PER_HEAD * VEC
    tile_elems = hc * TILE * LANES_PER_HEAD * VEC  # one slot of x (or k, or w): all heads, TILE groups
    assert 2 * (go_elems + v_elems) + SLOTS * tile_elems * (2 + 2 + 4) + 4 * 2 * hc * WARPS_PER_HEAD \
        == GATE_BWD_SHARED_BYTES
    n_x, n_kv, n_w, n_s, n_m, n_p = T.dynamic("n_x, n_kv, n_w, n_s, n_m, n_p")

    def fma(a, b, c):
        return T.call_extern("float32", "__fmaf_rn", a, b, c)

    def mul(a, b):
        return T.call_extern("float32", "__fmul_rn", a, b)

    def f32(v):
        return T.Cast("float32", v)

    def cp(dst, src):  # one 4-element vector, cp.async (8 bytes bf16, 16 bytes fp32)
        return T.ptx_cp_async(T.access_ptr(dst, "w", VEC), T.access_ptr(src, "r", VEC), VEC)

    def cp8(dst, src):  # one 8-element bf16 vector, a 16-byte cp.async
        return T.ptx_cp_async(T.access_ptr(dst, "w", PVEC), T.access_ptr(src, "r", PVEC), PVEC)

    @T.macro
    def issue_v(v_s, kv, tq64, n_stg, row_vecs, tid):
        """Token tq's staged v row, by thread id (read by every head: waited behind a barrier)."""
        v_src = (tq64 * (hc + 1) + hc) * row_vecs
        for q0 in T.serial(T.truncdiv(n_stg * LANES_PER_HEAD + (THREADS - 1), THREADS)):
            qv = q0 * THREADS + tid
            if qv < n_stg * LANES_PER_HEAD:
                cp(v_s[qv * VEC], kv[(v_src + qv) * VEC])
        T.ptx_commit_group()

    @T.macro
    def issue_go(go_s, grad_out, tq64, c_lo, c_hi, head, own, row_vecs):
        """Groups [c_lo, c_hi) of token tq's grad_out row of the thread's head, its own vectors."""
        go_src = (tq64 * hc + head) * row_vecs
        for c in T.serial(c_lo, c_hi):
            cv = c * LANES_PER_HEAD + own
            cp(go_s[(head * (STAGED * LANES_PER_HEAD) + cv) * VEC], grad_out[(go_src + cv) * VEC])
        T.ptx_commit_group()

    @T.macro
    def issue_tile(x_s, k_s, w_s, hidden_states, kv, weight_fused, t64, i, num_groups, head, own, row_vecs):
        """Tile i (chunks [i·TILE/2, (i+1)·TILE/2) of 512 elements, below H) of the thread's x, k and w into slot
        i % SLOTS: 16-byte copies of its own 8-element vectors (cp.async.cg, not through L1); a full tile without
        per-chunk tests (straight-line code, so nvcc shares the address arithmetic)."""
        h_el = row_vecs * VEC
        e0 = i * (TILE * 256) + PVEC * own  # the thread's first element of the tile in a head row
        x_src = (t64 * hc + head) * h_el + e0
        k_src = (t64 * (hc + 1) + head) * h_el + e0
        w_src = T.Cast("int64", head) * h_el + e0
        slot = (i % SLOTS) * tile_elems + head * (TILE * 256) + PVEC * own
        if (i + 1) * TILE <= num_groups:
            for u in T.unroll(TILE // 2):
                cp8(x_s[slot + u * 512], hidden_states[x_src + u * 512])
                cp8(k_s[slot + u * 512], kv[k_src + u * 512])
                cp(w_s[slot + u * 512], weight_fused[w_src + u * 512])
                cp(w_s[slot + u * 512 + VEC], weight_fused[w_src + u * 512 + VEC])
        else:
            for u in T.unroll(TILE // 2):
                if e0 + u * 512 < h_el:
                    cp8(x_s[slot + u * 512], hidden_states[x_src + u * 512])
                    cp8(k_s[slot + u * 512], kv[k_src + u * 512])
                    cp(w_s[slot + u * 512], weight_fused[w_src + u * 512])
                    cp(w_s[slot + u * 512 + VEC], weight_fused[w_src + u * 512 + VEC])
        T.ptx_commit_group()

    @T.macro
    def issue_first_tiles(x_s, k_s, w_s, hidden_states, kv, weight_fused, t64, n_tiles, num_groups, head, own,
                          row_vecs):
        """Token t64's first AHEAD tiles, one group each (an empty group past the last tile keeps the counts)."""
        for a in T.unroll(AHEAD):
            if a < n_tiles:
                issue_tile(x_s, k_s, w_s, hidden_states, kv, weight_fused, t64, a, num_groups, head, own, row_vecs)
            else:
                T.ptx_commit_group()

    @T.macro
    def issue_token(v_s, go_s, x_s, k_s, w_s, grad_out, hidden_states, kv, weight_fused, tq64, n_stg, g0, n_tiles,
                    num_groups, head, own, row_vecs, tid):
        """Everything token tq's phase 1 waits for, from scratch: v, both grad_out parts and the first tiles, in the
        order a later token's issue leaves them (wait_group(AFTER_V) then means: v has landed)."""
        issue_v(v_s, kv, tq64, n_stg, row_vecs, tid)
        issue_go(go_s, grad_out, tq64, 0, g0, head, own, row_vecs)
        issue_go(go_s, grad_out, tq64, g0, n_stg, head, own, row_vecs)
        issue_first_tiles(x_s, k_s, w_s, hidden_states, kv, weight_fused, tq64, n_tiles, num_groups, head, own,
                          row_vecs)

    @T.macro
    def group_step(bufs, t64, i, u, num_groups, head, own, row_vecs, p_row, dg, ncx, nck, from_regs, guard):
        """grad_x, grad_k and the weight-gradient terms of the thread's 8-element vector of chunk c2 = i·TILE/2 + u
        (elements c2·512 + 8·o ..., o = tid % 64): the sums in registers (c2 < REG/2; i and u unrolled, so the
        indices are constants) or in grad_w_partial. ``guard``: the tile may end before TILE groups (the last of H);
        a vector past H then stores nothing and keeps its sums. ncx = -cx and nck = -ck, so -(x·cx) is one
        multiply (x·(-cx) rounds to the same value)."""
        go_s, x_s, k_s, w_s, grad_out, grad_x, grad_kv, grad_w_partial, acc, go8, x8, k8, w8, p8, o8, q8, \
            gf, xf, kf = bufs
        c2 = i * (TILE // 2) + u
        e = c2 * 512 + PVEC * own  # element within the head row
        h_el = row_vecs * VEC
        sv = (i % SLOTS) * tile_elems + head * (TILE * 256) + u * 512 + PVEC * own
        x_dst = (t64 * hc + head) * h_el + e
        k_dst = (t64 * (hc + 1) + head) * h_el + e
        if from_regs and c2 < STAGED // 2:  # a constant test once i and u are unrolled
            for j in T.vectorized(PVEC):
                go8[j] = go_s[head * (STAGED * 256) + e + j]
        else:
            for j in T.vectorized(PVEC):
                go8[j] = grad_out[x_dst + j]
        if not from_regs:
            for j in T.vectorized(PVEC):
                p8[j] = grad_w_partial[p_row * VEC + e + j]
        for j in T.vectorized(PVEC):
            x8[j] = x_s[sv + j]
        for j in T.vectorized(PVEC):
            k8[j] = k_s[sv + j]
        for h2 in T.unroll(2):
            for j in T.vectorized(VEC):
                w8[h2 * VEC + j] = w_s[sv + h2 * VEC + j]
        for j in T.vectorized(PVEC):
            gf[j] = f32(go8[j])
        for j in T.vectorized(PVEC):
            xf[j] = f32(x8[j])
        for j in T.vectorized(PVEC):
            kf[j] = f32(k8[j])
        for j in T.unroll(PVEC):
            o8[j] = T.Cast("bfloat16", fma(fma(kf[j], w8[j], mul(xf[j], ncx)), dg, gf[j]))
            q8[j] = T.Cast("bfloat16", mul(fma(xf[j], w8[j], mul(kf[j], nck)), dg))
            if from_regs:
                if guard:
                    acc[c2 * PVEC + j] = T.if_then_else(e < h_el, fma(mul(dg, xf[j]), kf[j], acc[c2 * PVEC + j]),
                                                        acc[c2 * PVEC + j])
                else:
                    acc[c2 * PVEC + j] = fma(mul(dg, xf[j]), kf[j], acc[c2 * PVEC + j])
            else:
                p8[j] = fma(mul(dg, xf[j]), kf[j], p8[j])
        if guard:
            if e < h_el:
                for j in T.vectorized(PVEC):
                    grad_x[x_dst + j] = o8[j]
                for j in T.vectorized(PVEC):
                    grad_kv[k_dst + j] = q8[j]
                if not from_regs:
                    for h2 in T.unroll(2):
                        for j in T.vectorized(VEC):
                            grad_w_partial[p_row * VEC + e + h2 * VEC + j] = p8[h2 * VEC + j]
        else:
            for j in T.vectorized(PVEC):
                grad_x[x_dst + j] = o8[j]
            for j in T.vectorized(PVEC):
                grad_kv[k_dst + j] = q8[j]

    @T.macro
    def copy_image_token(grad_out, grad_x, grad_kv, mc, z8, x_el, k_el, num_groups, own, row_vecs):
        """An image token's rows of the thread's head: grad_x = grad_out, grad_k = 0, over its own 8-element vectors
        (as phase 3's), COPY_BATCH of them loaded before any is stored: the stores may alias the loads for the
        compiler, so one vector per round trip was the alternative."""
        h_el = row_vecs * VEC
        n_chunks = T.truncdiv(num_groups + 1, 2)
        for c0 in T.serial(T.truncdiv(n_chunks + (COPY_BATCH - 1), COPY_BATCH)):
            for u in T.unroll(COPY_BATCH):
                e = (c0 * COPY_BATCH + u) * 512 + PVEC * own
                if e < h_el:
                    for j in T.vectorized(PVEC):
                        mc[u * PVEC + j] = grad_out[x_el + e + j]
            for u in T.unroll(COPY_BATCH):
                e = (c0 * COPY_BATCH + u) * 512 + PVEC * own
                if e < h_el:
                    for j in T.vectorized(PVEC):
                        grad_x[x_el + e + j] = mc[u * PVEC + j]
                    for j in T.vectorized(PVEC):
                        grad_kv[k_el + e + j] = z8[j]

    @T.macro
    def staged_dot(go_s, v_s, gob, vb, s, c_lo, c_hi, head, own):
        """s += go·v over the staged groups [c_lo, c_hi) (c_lo < c_hi), serially c-major; the loads of four groups
        at a time, clamped into the range (the fma of a clamped group is not taken)."""
        for c0 in T.serial(T.truncdiv(c_hi - c_lo + 3, 4)):
            for u in T.unroll(4):
                cv = T.min(c_lo + c0 * 4 + u, c_hi - 1) * LANES_PER_HEAD + own
                for j in T.vectorized(VEC):
                    gob[u * VEC + j] = go_s[(head * (STAGED * LANES_PER_HEAD) + cv) * VEC + j]
                for j in T.vectorized(VEC):
                    vb[u * VEC + j] = v_s[cv * VEC + j]
            for u in T.unroll(4):
                for j in T.unroll(VEC):
                    s[0] = T.if_then_else(c_lo + c0 * 4 + u < c_hi, fma(f32(gob[u * VEC + j]), f32(vb[u * VEC + j]),
                                                                         s[0]), s[0])

    @T.macro
    def tile_head(x_s, k_s, w_s, go_s, hidden_states, kv, weight_fused, grad_out, t, t64, i, n_tiles, num_groups,
                  head, own, row_vecs, nxt, g0):
        """Before tile i's math: issue tile i + AHEAD (or an empty group, so the count stays) and wait for tile i;
        before the last, wait for everything, barrier, and issue the next token's first grad_out part [0, g0)."""
        if i + 1 < n_tiles:
            if i + AHEAD < n_tiles:
                issue_tile(x_s, k_s, w_s, hidden_states, kv, weight_fused, t64, i + AHEAD, num_groups, head, own,
                           row_vecs)
            else:
                T.ptx_commit_group()
            T.ptx_wait_group(AHEAD)
        else:
            T.ptx_wait_group(0)
            T.sync_threads()  # v landed for all; the grad_v pass and the earlier tiles are done with grad_out
            if nxt:
                issue_go(go_s, grad_out, T.Cast("int64", t + 1), 0, g0, head, own, row_vecs)

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
            go_s = T.alloc_shared((go_elems,), "bfloat16")  # [hc][STAGED·64 vectors]
            v_s = T.alloc_shared((v_elems,), "bfloat16")
            x_s = T.alloc_shared((SLOTS * tile_elems,), "bfloat16")  # [slot][hc][TILE·256 elements]
            k_s = T.alloc_shared((SLOTS * tile_elems,), "bfloat16")
            w_s = T.alloc_shared((SLOTS * tile_elems,), "float32")
            sums = T.alloc_shared((2 * hc * WARPS_PER_HEAD,), "float32")
            acc = T.alloc_local((REG * VEC,), "float32")  # the weight-gradient sums of the first REG groups
            go4 = T.alloc_local((VEC,), "bfloat16")
            go8 = T.alloc_local((PVEC,), "bfloat16")
            x8 = T.alloc_local((PVEC,), "bfloat16")
            k8 = T.alloc_local((PVEC,), "bfloat16")
            w8 = T.alloc_local((PVEC,), "float32")
            p8 = T.alloc_local((PVEC,), "float32")
            o8 = T.alloc_local((PVEC,), "bfloat16")
            q8 = T.alloc_local((PVEC,), "bfloat16")
            v4 = T.alloc_local((VEC,), "bfloat16")
            o4 = T.alloc_local((VEC,), "bfloat16")
            z4 = T.alloc_local((VEC,), "bfloat16")
            z8 = T.alloc_local((PVEC,), "bfloat16")
            mc = T.alloc_local((COPY_BATCH * PVEC,), "bfloat16")
            gf = T.alloc_local((PVEC,), "float32")
            xf = T.alloc_local((PVEC,), "float32")
            kf = T.alloc_local((PVEC,), "float32")
            gh = T.alloc_local((hc,), "float32")
            gv = T.alloc_local((VEC,), "float32")
            gob = T.alloc_local((4 * VEC,), "bfloat16")
            vb = T.alloc_local((4 * VEC,), "bfloat16")
            s = T.alloc_local((1,), "float32")
            dg = T.alloc_var("float32")
            ncx = T.alloc_var("float32")  # -cx, -ck
            nck = T.alloc_var("float32")
            masked = T.alloc_var("bool")
            issued = T.alloc_var("bool")  # this token's v, grad_out and first tiles were issued before it
            nxt = T.alloc_var("bool")
            T.pdl_sync()
            warp = tid // 32
            lane = tid % 32
            head = warp // WARPS_PER_HEAD
            half = warp % WARPS_PER_HEAD
            own = tid % LANES_PER_HEAD  # the thread's vector within a group of its head
            row_vecs = num_groups * LANES_PER_HEAD  # 4-element vectors per row of H
            n_stg = T.min(num_groups, STAGED)  # staged groups (Gs)
            n_tiles = T.truncdiv(num_groups + (TILE - 1), TILE)
            g0 = T.min((n_tiles - 1) * TILE, n_stg)  # grad_out's first part: the groups the last tile does not read
            hidden = f32(num_groups * (LANES_PER_HEAD * VEC))
            p_row = (T.Cast("int64", pid) * hc + head) * row_vecs
            gs_row = head * (STAGED * LANES_PER_HEAD)  # the head's staged grad_out row, in vectors
            per_block = T.truncdiv(num_tokens + num_partials - 1, num_partials)
            t_start = T.min(per_block * pid, num_tokens)
            t_end = T.min(per_block * (pid + 1), num_tokens)

            for j in T.unroll(VEC):
                z4[j] = T.Cast("bfloat16", T.float32(0))
            for j in T.unroll(PVEC):
                z8[j] = T.Cast("bfloat16", T.float32(0))
            for j in T.unroll(REG * VEC):
                acc[j] = T.float32(0)
            for c2 in T.serial(REG // 2, T.truncdiv(num_groups + 1, 2)):
                if c2 * 512 + PVEC * own < row_vecs * VEC:
                    for j in T.vectorized(PVEC):
                        grad_w_partial[p_row * VEC + c2 * 512 + PVEC * own + j] = T.float32(0)
            bufs = (go_s, x_s, k_s, w_s, grad_out, grad_x, grad_kv, grad_w_partial, acc, go8, x8, k8, w8, p8, o8, q8,
                    gf, xf, kf)
            issued = False
            for t in T.serial(t_start, t_end):
                t64 = T.Cast("int64", t)
                x_row = (t64 * hc + head) * row_vecs  # in vectors
                k_row = (t64 * (hc + 1) + head) * row_vecs
                v_row = (t64 * (hc + 1) + hc) * row_vecs
                masked = False
                if has_mask:
                    masked = image_token_mask[t]
                nxt = t + 1 < t_end
                if has_mask:
                    if nxt:
                        nxt = not image_token_mask[t + 1]
                if masked:
                    # the next token's v, grad_out and first tiles fly during the copy
                    if nxt:
                        # an unmasked token just before this one ended with its last tile, whose threads read
                        # grad_out groups [g0, Gs) of other threads' copies without a barrier after it
                        T.sync_threads()
                        issue_token(v_s, go_s, x_s, k_s, w_s, grad_out, hidden_states, kv, weight_fused,
                                    T.Cast("int64", t + 1), n_stg, g0, n_tiles, num_groups, head, own, row_vecs, tid)
                    copy_image_token(grad_out, grad_x, grad_kv, mc, z8, x_row * VEC, k_row * VEC, num_groups, own,
                                     row_vecs)
                    for q0 in T.serial(T.truncdiv(row_vecs + (THREADS - 1), THREADS)):
                        if q0 * THREADS + tid < row_vecs:
                            for j in T.vectorized(VEC):
                                grad_kv[(v_row + q0 * THREADS + tid) * VEC + j] = z4[j]
                    if nxt:
                        T.ptx_wait_group(AFTER_V)
                        T.sync_threads()  # every thread's part of v has landed
                    issued = nxt
                else:
                    if not issued:
                        T.sync_threads()  # v may still be read by an earlier token's threads
                        issue_token(v_s, go_s, x_s, k_s, w_s, grad_out, hidden_states, kv, weight_fused, t64, n_stg,
                                    g0, n_tiles, num_groups, head, own, row_vecs, tid)
                        T.ptx_wait_group(AFTER_V)
                        T.sync_threads()  # every thread's part of v has landed
                    # 1. G = Σ go·v in the peer's lane order
                    s[0] = T.float32(0)
                    T.ptx_wait_group(AFTER_V - 1)  # the first part (the second part and the first tiles may fly)
                    staged_dot(go_s, v_s, gob, vb, s, 0, g0, head, own)
                    T.ptx_wait_group(AHEAD)
                    staged_dot(go_s, v_s, gob, vb, s, g0, n_stg, head, own)
                    for c in T.serial(n_stg, num_groups):
                        cv = c * LANES_PER_HEAD + own
                        for j in T.vectorized(VEC):
                            go4[j] = grad_out[(x_row + cv) * VEC + j]
                        for j in T.vectorized(VEC):
                            v4[j] = kv[(v_row + cv) * VEC + j]
                        for j in T.unroll(VEC):
                            s[0] = fma(f32(go4[j]), f32(v4[j]), s[0])
                    s[0] = T.warp_reduce_sum(s[0])
                    if lane == 0:
                        sums[((t % 2) * hc + head) * WARPS_PER_HEAD + half] = s[0]
                    T.sync_threads()
                    s[0] = sums[((t % 2) * hc + head) * WARPS_PER_HEAD] + sums[((t % 2) * hc + head) * WARPS_PER_HEAD + 1]
                    # 2. the next token's v (every thread is done with this token's)
                    if nxt:
                        issue_v(v_s, kv, T.Cast("int64", t + 1), n_stg, row_vecs, tid)
                    else:
                        T.ptx_commit_group()  # an empty group keeps the waits' counts
                    raw = dot_in[t64 * hc + head]
                    g = gate_in[t64 * hc + head]
                    rx = rstd_x_in[t64 * hc + head]
                    rk = rstd_k_in[t64 * hc + head]
                    dg = T.if_then_else(
                        mul(mul(mul(T.abs(raw), scalar), rx), rk) < clamp_value,
                        T.float32(0),
                        mul(mul(mul(mul(s[0], g), T.float32(1) - g), T.float32(0.5)),
                            T.sqrt(mul(mul(scalar, rx), rk) / T.abs(raw))))
                    ncx = -(mul(mul(raw, rx), rx) / hidden)
                    nck = -(mul(mul(raw, rk), rk) / hidden)
                    # grad_v = Σ_h go_h·g_h, heads in order, from +0
                    for hh in T.unroll(hc):
                        gh[hh] = gate_in[t64 * hc + hh]
                    for q0 in T.serial(T.truncdiv(row_vecs + (THREADS - 1), THREADS)):
                        qv = q0 * THREADS + tid
                        if qv < row_vecs:
                            for j in T.unroll(VEC):
                                gv[j] = T.float32(0)
                            for hh in T.unroll(hc):
                                if qv < n_stg * LANES_PER_HEAD:
                                    for j in T.vectorized(VEC):
                                        go4[j] = go_s[(hh * (STAGED * LANES_PER_HEAD) + qv) * VEC + j]
                                else:
                                    for j in T.vectorized(VEC):
                                        go4[j] = grad_out[((t64 * hc + hh) * row_vecs + qv) * VEC + j]
                                for j in T.unroll(VEC):
                                    gv[j] = fma(f32(go4[j]), gh[hh], gv[j])
                            for j in T.unroll(VEC):
                                o4[j] = T.Cast("bfloat16", gv[j])
                            for j in T.vectorized(VEC):
                                grad_kv[(v_row + qv) * VEC + j] = o4[j]
                    # 3. grad_x, grad_k and the weight-gradient terms, tile by tile, AHEAD tiles ahead
                    for i in T.unroll(REG // TILE):
                        if i < n_tiles:
                            tile_head(x_s, k_s, w_s, go_s, hidden_states, kv, weight_fused, grad_out, t, t64, i,
                                      n_tiles, num_groups, head, own, row_vecs, nxt, g0)
                            if (i + 1) * TILE <= num_groups:
                                for u in T.unroll(TILE // 2):
                                    group_step(bufs, t64, i, u, num_groups, head, own, row_vecs, p_row, dg, ncx, nck,
                                               True, False)
                            else:
                                for u in T.unroll(TILE // 2):
                                    group_step(bufs, t64, i, u, num_groups, head, own, row_vecs, p_row, dg, ncx, nck,
                                               True, True)
                    for i in T.serial(REG // TILE, n_tiles):
                        tile_head(x_s, k_s, w_s, go_s, hidden_states, kv, weight_fused, grad_out, t, t64, i, n_tiles,
                                  num_groups, head, own, row_vecs, nxt, g0)
                        for u in T.serial(TILE // 2):
                            group_step(bufs, t64, i, u, num_groups, head, own, row_vecs, p_row, dg, ncx, nck, False,
                                       True)
                    if nxt:
                        T.sync_threads()  # every thread is done reading grad_out (phase 3 crosses threads)
                        issue_go(go_s, grad_out, T.Cast("int64", t + 1), g0, n_stg, head, own, row_vecs)
                        issue_first_tiles(x_s, k_s, w_s, hidden_states, kv, weight_fused, T.Cast("int64", t + 1),
                                          n_tiles, num_groups, head, own, row_vecs)
                    issued = nxt
            for c2 in T.unroll(REG // 2):
                if c2 * 512 + PVEC * own < row_vecs * VEC:
                    for j in T.vectorized(PVEC):
                        grad_w_partial[p_row * VEC + c2 * 512 + PVEC * own + j] = acc[c2 * PVEC + j]
            T.pdl_trigger()

    return engram_gate_bwd
