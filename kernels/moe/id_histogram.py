"""id_histogram: the counts of ids in [0, B) of an int64 [T, K] tensor, for v1 group_count and aux_fi
(docs/SPEC.md §3.1).

Each CTA counts a contiguous flat range into a shared-memory histogram (int atomics) and adds its non-zero
bins to ``counts`` in global memory (int atomics: the totals are exact and independent of the order, the
grid size and the SM count). ``counts`` has B + 1 int32 words and is zeroed by the caller; word B is a
ticket. More than MAX_SHARED_BINS bins go straight to global atomics (DIRECT flag).

aux_fi (FREQ flag): the CTA that takes the last ticket, after a device fence, reads the final counts and
writes freq[b] = fp32(counts[b] * scale) / den with IEEE division (den = fp32(T * num_aux_topk), given by
the host), the reference's formula. One launch after the zeroing, no host synchronization.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401

# Declared in kernelkiln_contract.moe (ID_HISTOGRAM): the CTA size, and the launch-argument names below, which the
# build checks against this PrimFunc.
MAX_SHARED_BINS = 4096
FREQ, DIRECT = 1, 2  # flags


def build(p, arch):
    import tilelang.language as T

    del arch
    th = p["threads"]
    ids_numel, cnt_numel, freq_numel = T.dynamic("ids_numel, cnt_numel, freq_numel")

    @T.prim_func
    def id_histogram(
        ids: T.Tensor((ids_numel,), "int64"),  # [T, K], inner stride 1
        counts: T.Tensor((cnt_numel,), "int32"),  # [B + 1], zeroed; [B] = ticket
        freq: T.Tensor((freq_numel,), "float32"),  # [B] (FREQ only)
        numel: T.int32,  # T * K
        num_cols: T.int32,  # K
        row_stride: T.int32,
        num_bins: T.int32,  # B
        per_cta: T.int32,  # flat elements per CTA
        num_ctas: T.int32,
        scale: T.int32,  # FREQ: the count multiplier (num_experts)
        den: T.float32,  # FREQ: fp32(T * num_aux_topk)
        flags: T.int32,
    ):
        with T.Kernel(num_ctas, threads=th) as bx:
            tx = T.get_thread_binding()
            hist = T.alloc_shared((MAX_SHARED_BINS,), "int32")
            # TileLang's planner may overlay `last` on hist[0]: it is written only after the barrier
            # that ends the last read of hist, so that is safe.
            last = T.alloc_shared((1,), "int32")
            direct = T.bitwise_and(flags, DIRECT) != 0
            if not direct:
                for b in T.serial(tx, num_bins, th):
                    hist[b] = 0
            T.sync_threads()
            T.pdl_sync()
            lo = T.min(bx * per_cta, numel)
            hi = T.min(lo + per_cta, numel)
            for i in T.serial(lo + tx, hi, th):
                r = T.truncdiv(i, num_cols)  # i >= 0: truncation is floor, without TIR's sign fix-ups
                v = ids[T.Cast("int64", r) * row_stride + (i - r * num_cols)]
                if v >= T.int64(0) and v < T.Cast("int64", num_bins):
                    if direct:
                        T.atomic_add(counts[T.Cast("int32", v)], 1)
                    else:
                        T.atomic_add(hist[T.Cast("int32", v)], 1)
            T.sync_threads()
            if not direct:
                for b in T.serial(tx, num_bins, th):
                    if hist[b] != 0:
                        T.atomic_add(counts[b], hist[b])
            if T.bitwise_and(flags, FREQ) != 0:
                # every thread orders its own atomics before the ticket (threadFenceReduction pattern)
                T.evaluate(T.call_extern("handle", "__threadfence"))
                T.sync_threads()
                if tx == 0:
                    ticket = T.atomic_add(counts[num_bins], 1, return_prev=True)
                    last[0] = T.if_then_else(ticket == num_ctas - 1, 1, 0)
                T.sync_threads()
                if last[0] != 0:
                    T.evaluate(T.call_extern("handle", "__threadfence"))
                    for b in T.serial(tx, num_bins, th):
                        c = T.atomic_add(counts[b], 0, return_prev=True)  # an L2 read, never a stale L1 line
                        freq[b] = T.call_extern("float32", "__fdiv_rn",
                                                T.Cast("float32", T.Cast("int64", c) * T.Cast("int64", scale)), den)
            T.pdl_trigger()

    return id_histogram
