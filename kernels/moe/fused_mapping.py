"""get_fused_mapping (v1): the expert-major ("fused") layout of a [T, K] routing (docs/SPEC.md §3.1).

Three launches in a fixed order instead of the peer's cooperative grid sync (no host sync,
graph-capturable, PDL-compatible):

* stage "count" (grid G = num_sms CTAs): CTA g counts the expert ids of its flat range
  ``[g*NW*L, (g+1)*NW*L)`` into ``cnt[g, e]`` and fills the three pos_to_* maps with -1.
* stage "scan" (one CTA): per expert e, ``cnt[g, e]`` becomes the exclusive prefix over g
  (in place); the aligned totals are scanned over experts into expert_start / expert_end /
  num_tokens_per_expert.
* stage "place" (grid G): CTA g re-counts per warp, turns the counts into per-warp end
  offsets (expert_start + cnt[g, e] + inclusive warp prefix) and claims slots.

Slot order (bit-identical to the peer for the same num_sms): the flat index i = t*K + k is
split into chunks of ``L = align32(ceil(T*K / (G*NW)))`` (NW = warps per CTA = THREADS/32,
THREADS = the power of two >= E, at least 256); chunks keep ascending order per expert, and
inside a chunk slots are claimed from the chunk's end, i.e. in descending flat order.
Each 32-lane round groups equal ids with ``__match_any_sync``; lane ranks come from popc.

Ids outside [0, E) (including -1) get no slot and token_topk_to_pos -1. Slots >= N (an
undersized num_expanded_tokens) are not written (token_topk_to_pos still holds them).

Compile-time: stage and THREADS (256 for E <= 256, 512 for E <= 512). Runtime: everything else.
"""
# Declared in kernelkiln_contract.moe (GET_FUSED_MAPPING): the stage and the CTA size, and each stage's
# launch-argument names, which the build checks against the three PrimFuncs below.
PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
    # The place stage's round loop has a per-warp trip count: the automatic barriers TileLang
    # would insert there are unsafe. Every shared-memory hazard here has an explicit barrier.
    "tl.disable_thread_storage_sync": True,
}
SCAN_BATCH = 16  # cnt loads in flight per thread in the scan stage


def build(p, arch):
    del arch
    return {"count": _count, "scan": _scan, "place": _place}[p["stage"]](p["threads"])


def _count(th):
    import tilelang.language as T

    nw = th // 32
    idx_numel, n_numel, cnt_numel = T.dynamic("idx_numel, n_numel, cnt_numel")

    @T.prim_func
    def fused_mapping_count(
        topk_idx: T.Tensor((idx_numel,), "int64"),  # [T, K] contiguous
        pos_to_expert: T.Tensor((n_numel,), "int32"),
        pos_to_token: T.Tensor((n_numel,), "int32"),
        pos_to_token_topk: T.Tensor((n_numel,), "int32"),
        cnt: T.Tensor((cnt_numel,), "int32"),  # [G, E] scratch
        numel: T.int32,  # T * K
        num_experts: T.int32,
        num_expanded: T.int32,  # N
        chunk: T.int32,  # L
        num_ctas: T.int32,  # G
    ):
        with T.Kernel(num_ctas, threads=th) as bx:
            tx = T.get_thread_binding()
            hist = T.alloc_shared((th,), "int32")
            hist[tx] = 0
            T.sync_threads()
            T.pdl_sync()
            lo = T.min(bx * (nw * chunk), numel)
            hi = T.min(lo + nw * chunk, numel)
            for i in T.serial(lo + tx, hi, th):
                e = topk_idx[i]
                if e >= 0 and e < T.Cast("int64", num_experts):
                    T.atomic_add(hist[T.Cast("int32", e)], 1)
            for i in T.serial(bx * th + tx, num_expanded, num_ctas * th):
                pos_to_expert[i] = -1
                pos_to_token[i] = -1
                pos_to_token_topk[i] = -1
            T.sync_threads()
            if tx < num_experts:
                cnt[bx * num_experts + tx] = hist[tx]
            T.pdl_trigger()

    return fused_mapping_count


def _scan(th):
    import tilelang.language as T

    cnt_numel = T.dynamic("cnt_numel")
    steps = th.bit_length() - 1

    @T.prim_func
    def fused_mapping_scan(
        cnt: T.Tensor((cnt_numel,), "int32"),  # [G, E]: counts in, exclusive prefixes over g out
        expert_start: T.Tensor((th,), "int32"),
        expert_end: T.Tensor((th,), "int32"),
        num_tokens_per_expert: T.Tensor((th,), "int32"),
        num_experts: T.int32,
        num_groups: T.int32,  # G
        alignment: T.int32,
    ):
        with T.Kernel(1, threads=th):
            tx = T.get_thread_binding()
            buf = T.alloc_shared((2 * th,), "int32")  # double-buffered Hillis-Steele scan
            vals = T.alloc_local((SCAN_BATCH,), "int32")
            run = T.alloc_var("int32")
            aligned = T.alloc_var("int32")
            run = 0
            T.pdl_sync()
            if tx < num_experts:
                for b in T.serial(T.ceildiv(num_groups, SCAN_BATCH)):
                    # all loads of a batch first, so SCAN_BATCH of them are in flight
                    for j in T.unroll(SCAN_BATCH):
                        vals[j] = 0
                        if b * SCAN_BATCH + j < num_groups:
                            vals[j] = cnt[(b * SCAN_BATCH + j) * num_experts + tx]
                    for j in T.unroll(SCAN_BATCH):
                        if b * SCAN_BATCH + j < num_groups:
                            cnt[(b * SCAN_BATCH + j) * num_experts + tx] = run
                        run = run + vals[j]
            aligned = T.ceildiv(run, alignment) * alignment
            buf[tx] = aligned
            T.sync_threads()
            for s in T.unroll(steps):
                src = (s % 2) * th
                dst = th - src
                off = 1 << s
                if tx >= off:
                    buf[dst + tx] = buf[src + tx] + buf[src + tx - off]
                else:
                    buf[dst + tx] = buf[src + tx]
                T.sync_threads()
            incl = buf[(steps % 2) * th + tx]
            if tx < num_experts:
                expert_start[tx] = incl - aligned
                expert_end[tx] = incl
                num_tokens_per_expert[tx] = aligned
            T.pdl_trigger()

    return fused_mapping_scan


def _place(th):
    import tilelang.language as T

    nw = th // 32
    idx_numel, n_numel, cnt_numel, e_numel = T.dynamic("idx_numel, n_numel, cnt_numel, e_numel")

    @T.prim_func
    def fused_mapping_place(
        topk_idx: T.Tensor((idx_numel,), "int64"),
        token_topk_to_pos: T.Tensor((idx_numel,), "int32"),
        pos_to_expert: T.Tensor((n_numel,), "int32"),
        pos_to_token: T.Tensor((n_numel,), "int32"),
        pos_to_token_topk: T.Tensor((n_numel,), "int32"),
        cnt: T.Tensor((cnt_numel,), "int32"),  # [G, E] exclusive prefixes from the scan stage
        expert_start: T.Tensor((e_numel,), "int32"),
        numel: T.int32,
        num_topk: T.int32,
        num_experts: T.int32,
        num_expanded: T.int32,
        chunk: T.int32,
        num_ctas: T.int32,
    ):
        with T.Kernel(num_ctas, threads=th) as bx:
            tx = T.get_thread_binding()
            warp = tx // 32
            lane = tx % 32
            hist = T.alloc_shared((nw * th,), "int32")  # [warp, expert]: counts, then end offsets
            run = T.alloc_var("int32")
            key = T.alloc_var("int32")
            for w in T.unroll(nw):
                hist[w * th + tx] = 0
            T.sync_threads()
            T.pdl_sync()
            lo = T.min((bx * nw + warp) * chunk, numel)
            hi = T.min(lo + chunk, numel)
            for i in T.serial(lo + lane, hi, 32):
                e = topk_idx[i]
                if e >= 0 and e < T.Cast("int64", num_experts):
                    T.atomic_add(hist[warp * th + T.Cast("int32", e)], 1)
            T.sync_threads()
            if tx < num_experts:
                run = cnt[bx * num_experts + tx] + expert_start[tx]
                for w in T.unroll(nw):
                    run = run + hist[w * th + tx]
                    hist[w * th + tx] = run
            T.sync_threads()
            below = T.shift_left(T.uint32(2), T.Cast("uint32", lane)) - T.uint32(1)  # lanes <= mine
            for r in T.serial(T.ceildiv(hi - lo, 32)):
                i = lo + r * 32 + lane
                key = -1
                if i < hi:
                    e = topk_idx[i]
                    if e >= 0 and e < T.Cast("int64", num_experts):
                        key = T.Cast("int32", e)
                same = T.call_extern("uint32", "__match_any_sync", T.uint32(0xFFFFFFFF), key)
                rank = T.call_extern("int32", "__popc", T.bitwise_and(same, below))
                prefix = T.alloc_var("int32")
                prefix = 0
                if key >= 0:
                    prefix = hist[warp * th + key]
                T.sync_warp()  # every lane has read its prefix before the top lane moves it
                pos = prefix - rank
                if key >= 0:
                    if T.bitwise_and(same, T.bitwise_not(below)) == T.uint32(0):
                        hist[warp * th + key] = pos
                    token_topk_to_pos[i] = pos
                    if pos < num_expanded:
                        pos_to_expert[pos] = key
                        pos_to_token[pos] = i // num_topk
                        pos_to_token_topk[pos] = i
                elif i < hi:
                    token_topk_to_pos[i] = -1
                T.sync_warp()
            T.pdl_trigger()

    return fused_mapping_place
