"""engram_gate_fwd: the Engram gate forward (spec: the contract's doc, kernelkiln_contract.engram_gate).

Thread level, because the bits are decided by which lane sums which elements in which order, and because that
ownership also makes the pipeline barrier-free: one warp per CTA, grid [hc, P]; the CTA of (head h, block b) takes
the tokens b, b + P, b + 2P, ... (interleaved rather than contiguous runs, so that the CTAs in flight read
neighbouring rows; the store A/Bs are in benchmarks/results/TARGETS.md, issue 16). Lane l owns the 8-element
vectors c·256 + 8l of every row (16 bytes of x, k and v, 32 bytes of w). It copies its own vectors into shared
memory with cp.async (16 bytes, L2 only) and reads back only what it copied itself, so its ``cp.async.wait_group``
orders everything and no barrier is needed (a tile-level ``T.async_copy`` would spread the bytes over the warp as
its layout inference likes). The ``__syncwarp()`` at the start of each step and after each wait is a compiler
barrier only (ptxas makes it a NOP): TileLang's cp.async and wait asm have no memory clobber, and no shared-memory
read may move above its wait or below the copy that next overwrites it.

Shared memory per CTA (GATE_FWD_SHARED_BYTES, 14336 bytes: 15 CTAs per SM):

* ``xs``: the token's x row, its first GATE_FWD_STAGED_GROUPS groups of 256 (all of it for H <= 4096), read by
  both passes, so x comes from DRAM once;
* ``ring``: SLOTS = GATE_FWD_RING_SLOTS slots of one block (GATE_FWD_BLOCK_GROUPS groups) each. A token's ring
  items are its k blocks, then its v blocks; the item consumed at a step is always the one issued SLOTS - 1 steps
  earlier, into the slot the previous step consumed.

Per token: pass 1 walks the k items (issue the item SLOTS - 1 ahead, wait, sum the block), each lane summing the
squares and the weighted dot serially with explicit fma (c-major, then the 8 elements; w is read from global one
block ahead, in registers); its last steps already issue v_0, v_1, .... The xor butterfly, the scalar epilogue and
the saved rows follow. Pass 2 writes ``fma(g, v, x)`` rounded to bf16 block by block and prefetches the NEXT
token: its x block b into xs as soon as this token has read block b, and its first SLOTS - 1 k blocks as the ring
items after this token's last v. So at a token boundary the next token's x row and first k blocks are in flight or
landed (a warm start). The next token starts cold (its x_0.. and k_0.. issued first, each x block then riding with
its k block) when it is masked or the CTA's last, or when the row has fewer than SLOTS blocks (H <= 2048).

cp.async groups: every step commits one group (possibly empty), so an item issued SLOTS - 1 steps before is
complete once at most SLOTS - 1 groups are pending. Between tokens one more group sits: the warm start's last x
block, or an empty one after a cold start's SLOTS - 1 prologue groups; the items issued before it wait for SLOTS.

H is a runtime value: a partial last block predicates its groups; the groups past GATE_FWD_STAGED_GROUPS (H >
4096) are not staged: their x is read from global in both passes (the second read hits L2), same order, same bits.
Image tokens copy the row (16-byte loads and stores, a block at a time) or do nothing in place.
"""
from kernelkiln_contract.engram_gate import GATE_FWD_BLOCK_GROUPS as BLOCK
from kernelkiln_contract.engram_gate import GATE_FWD_CTAS_PER_SM
from kernelkiln_contract.engram_gate import GATE_FWD_RING_SLOTS as SLOTS
from kernelkiln_contract.engram_gate import GATE_FWD_SHARED_BYTES
from kernelkiln_contract.engram_gate import GATE_FWD_STAGED_GROUPS as STAGED
from kernelkiln_contract.engram_gate import GATE_FWD_THREADS as THREADS

PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,  # the cp.async pipeline is written out; no producer/consumer rewrite
    "tl.disable_safe_memory_legalize": True,  # every access is guarded here (the automatic guards split vectors)
    "tl.disable_thread_storage_sync": True,  # lanes share no shared memory: no barriers to insert
}

VEC = 8  # elements per lane and group
GROUP = THREADS * VEC  # 256 elements per group
SLOT = BLOCK * GROUP  # elements per ring slot
STAGED_BLOCKS = STAGED // BLOCK
assert STAGED % BLOCK == 0 and SLOTS >= 2 and STAGED_BLOCKS >= SLOTS
assert 2 * (STAGED * GROUP + SLOTS * SLOT) == GATE_FWD_SHARED_BYTES  # bf16 xs + ring: what the CTA count assumes


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

    def cp16(dst, src):  # one lane's 16-byte cp.async (dst, src: BufferLoads of the first element)
        return T.ptx_cp_async(T.access_ptr(dst, "w", VEC), T.access_ptr(src, "r", VEC), VEC)

    @T.macro
    def issue_block(ring, src, base, blk, s, num_groups, lv):
        """The lane's vectors of block ``blk`` of the row at ``base`` into ring slot ``s``."""
        for u in T.unroll(BLOCK):
            if blk * BLOCK + u < num_groups:
                cp16(ring[s * SLOT + u * GROUP + lv], src[base + (blk * BLOCK + u) * GROUP])

    @T.macro
    def issue_x(xs, hidden_states, base, blk, num_groups, lv):
        """The lane's vectors of block ``blk`` of the x row at ``base`` into xs (staged blocks only)."""
        if blk < STAGED_BLOCKS:
            for u in T.unroll(BLOCK):
                if blk * BLOCK + u < num_groups:
                    cp16(xs[(blk * BLOCK + u) * GROUP + lv], hidden_states[base + (blk * BLOCK + u) * GROUP])

    @T.macro
    def issue_own(ring, xs, hidden_states, kv, q, s, with_x, x_row, k_row, v_row, num_blk, num_groups, lv):
        """Ring item ``q`` of this token (k block q, or v block q - num_blk; none past the end), with x block q."""
        if q < num_blk:
            issue_block(ring, kv, k_row, q, s, num_groups, lv)
            if with_x:
                issue_x(xs, hidden_states, x_row, q, num_groups, lv)
        elif q < 2 * num_blk:
            issue_block(ring, kv, v_row, q - num_blk, s, num_groups, lv)

    @T.macro
    def wait_item(q):
        """Wait for ring item ``q`` of this token (and everything issued before it)."""
        if q < SLOTS - 1:
            T.ptx_wait_group(SLOTS)
        else:
            T.ptx_wait_group(SLOTS - 1)
        T.sync_warp()  # no read of the item moves above the wait

    @T.macro
    def load_x(xb, hidden_states, x_row, blk, num_groups):
        """x block ``blk`` from global into xb (the blocks past the staged ones); a group past the end loads the
        last group again (not used)."""
        for u in T.unroll(BLOCK):
            cc = T.min(blk * BLOCK + u, num_groups - 1) * GROUP
            for j in T.vectorized(VEC):
                xb[u * VEC + j] = hidden_states[x_row + cc + j]

    @T.macro
    def load_w(wl, weight_fused, w_row, blk, num_groups):
        for u in T.unroll(BLOCK):
            cc = T.min(blk * BLOCK + u, num_groups - 1) * GROUP
            for j in T.vectorized(VEC):
                wl[u * VEC + j] = weight_fused[w_row + cc + j]

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
            xs = T.alloc_shared((STAGED * GROUP,), "bfloat16")  # the x row (its first STAGED groups)
            ring = T.alloc_shared((SLOTS * SLOT,), "bfloat16")  # k blocks, then v blocks
            xb = T.alloc_local((BLOCK * VEC,), "bfloat16")
            kb = T.alloc_local((BLOCK * VEC,), "bfloat16")
            wl = T.alloc_local((BLOCK * VEC,), "float32")
            vb = T.alloc_local((VEC,), "bfloat16")
            ob = T.alloc_local((VEC,), "bfloat16")
            sx = T.alloc_var("float32")
            sk = T.alloc_var("float32")
            sd = T.alloc_var("float32")
            rx = T.alloc_var("float32")
            rk = T.alloc_var("float32")
            g = T.alloc_var("float32")
            masked = T.alloc_var("bool")
            m_next = T.alloc_var("bool")  # the mask of token t + P (False past the CTA's last)
            nxt = T.alloc_var("bool")  # the next token continues the pipeline (warm start)
            warm = T.alloc_var("bool")  # this token's x row and first k blocks were issued by the previous token
            pos = T.alloc_var("int32")  # the ring slot of the next item to consume
            T.annotate_min_blocks_per_sm(GATE_FWD_CTAS_PER_SM)  # the persistent grid assumes them all resident
            T.pdl_sync()
            num_blk = T.truncdiv(num_groups + (BLOCK - 1), BLOCK)
            row = T.Cast("int64", num_groups) * GROUP  # elements per row of H
            hidden = T.Cast("float32", num_groups * GROUP)
            count = T.truncdiv(T.max(num_tokens - pid_b, 0) + num_blocks - 1, num_blocks)  # tokens pid_b + i·P
            lv = lane * VEC  # the lane's offset in a group
            w_row = T.Cast("int64", pid_h) * row + lv
            warm = False
            pos = 0
            masked = False
            if has_mask:
                if pid_b < num_tokens:
                    masked = image_token_mask[pid_b]
            load_w(wl, weight_fused, w_row, 0, num_groups)  # w block 0: the same for every token of the CTA
            for it in T.serial(count):
                t = pid_b + it * num_blocks
                t64 = T.Cast("int64", t)
                x_row = (t64 * hc + pid_h) * row + lv  # element offsets of the lane's first vector
                k_row = (t64 * (hc + 1) + pid_h) * row + lv
                v_row = (t64 * (hc + 1) + hc) * row + lv
                x_nxt = x_row + T.Cast("int64", num_blocks) * hc * row  # token t + P
                k_nxt = k_row + T.Cast("int64", num_blocks) * (hc + 1) * row
                m_next = False
                if has_mask:
                    if it + 1 < count:
                        m_next = image_token_mask[t + num_blocks]  # needed in pass 2 and by the next token
                if masked:
                    if not inplace:
                        for i in T.serial(num_blk):
                            load_x(xb, hidden_states, x_row, i, num_groups)
                            for u in T.unroll(BLOCK):
                                if i * BLOCK + u < num_groups:
                                    for j in T.vectorized(VEC):
                                        output[x_row + (i * BLOCK + u) * GROUP + j] = xb[u * VEC + j]
                else:
                    nxt = it + 1 < count and num_blk >= SLOTS
                    if has_mask:
                        nxt = nxt and not m_next
                    if not warm:  # cold start: items 0 .. SLOTS-2 with their x blocks, then the extra group
                        T.sync_warp()
                        for m in T.unroll(SLOTS - 1):
                            issue_own(ring, xs, hidden_states, kv, m, (pos + m) % SLOTS, True, x_row, k_row, v_row,
                                      num_blk, num_groups, lv)
                            T.ptx_commit_group()
                        T.ptx_commit_group()
                    # pass 1: the sums
                    sx = T.float32(0)
                    sk = T.float32(0)
                    sd = T.float32(0)
                    for i in T.serial(num_blk):
                        T.sync_warp()  # the reads of the slot refilled here are done
                        issue_own(ring, xs, hidden_states, kv, i + (SLOTS - 1), (pos + (SLOTS - 1)) % SLOTS,
                                  not warm, x_row, k_row, v_row, num_blk, num_groups, lv)
                        T.ptx_commit_group()
                        if i >= STAGED_BLOCKS:
                            load_x(xb, hidden_states, x_row, i, num_groups)
                        wait_item(i)
                        for u in T.unroll(BLOCK):
                            if i * BLOCK + u < num_groups:
                                if i < STAGED_BLOCKS:
                                    for j in T.vectorized(VEC):
                                        xb[u * VEC + j] = xs[(i * BLOCK + u) * GROUP + lv + j]
                                for j in T.vectorized(VEC):
                                    kb[u * VEC + j] = ring[pos * SLOT + u * GROUP + lv + j]
                                for j in T.unroll(VEC):
                                    xf = T.Cast("float32", xb[u * VEC + j])
                                    kf = T.Cast("float32", kb[u * VEC + j])
                                    sx = fma(xf, xf, sx)
                                    sk = fma(kf, kf, sk)
                                    sd = fma(mul(xf, wl[u * VEC + j]), kf, sd)
                        # w of the next block (block 0 of the next token after the last one)
                        load_w(wl, weight_fused, w_row, T.if_then_else(i + 1 < num_blk, i + 1, 0), num_groups)
                        pos = (pos + 1) % SLOTS
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
                    # pass 2: the output; the next token's x blocks and first k blocks
                    for i in T.serial(num_blk):
                        T.sync_warp()
                        q = num_blk + i + (SLOTS - 1)
                        if q < 2 * num_blk:
                            issue_block(ring, kv, v_row, q - num_blk, (pos + (SLOTS - 1)) % SLOTS, num_groups, lv)
                        elif nxt:  # k block q - 2·num_blk <= SLOTS - 2 of the next token
                            issue_block(ring, kv, k_nxt, q - 2 * num_blk, (pos + (SLOTS - 1)) % SLOTS, num_groups,
                                        lv)
                        if nxt:
                            if i >= 1:  # x block i - 1 of the next token: this token read it at step i - 1
                                issue_x(xs, hidden_states, x_nxt, i - 1, num_groups, lv)
                        T.ptx_commit_group()
                        if i >= STAGED_BLOCKS:
                            load_x(xb, hidden_states, x_row, i, num_groups)
                        wait_item(num_blk + i)
                        for u in T.unroll(BLOCK):
                            if i * BLOCK + u < num_groups:
                                if i < STAGED_BLOCKS:
                                    for j in T.vectorized(VEC):
                                        xb[u * VEC + j] = xs[(i * BLOCK + u) * GROUP + lv + j]
                                for j in T.vectorized(VEC):
                                    vb[j] = ring[pos * SLOT + u * GROUP + lv + j]
                                for j in T.unroll(VEC):
                                    ob[j] = T.Cast("bfloat16",
                                                   fma(g, T.Cast("float32", vb[j]), T.Cast("float32", xb[u * VEC + j])))
                                for j in T.vectorized(VEC):
                                    output[x_row + (i * BLOCK + u) * GROUP + j] = ob[j]
                        pos = (pos + 1) % SLOTS
                    if nxt:  # the next token's last x block: the extra group between the tokens
                        T.sync_warp()
                        issue_x(xs, hidden_states, x_nxt, num_blk - 1, num_groups, lv)
                        T.ptx_commit_group()
                    warm = nxt
                masked = m_next
            T.pdl_trigger()

    return engram_gate_fwd
