"""engram_sinkhorn_finalize: the final row-normalized matrix times alpha (spec: the contract's doc,
kernelkiln_contract.engram_sinkhorn).

One CTA per row, thread level for the same reason as engram_sinkhorn_step (the peer's reduction order with a
runtime head dim D), and with the step's column layout and per-arch order of the row's sum of squares (see
kernels/engram/engram_sinkhorn_step.py): x = (r * A) * c, s = sum of x^2, k = alpha / (sqrtf(s) + eps),
out = x * k. row_scale is read, never written.

The row's first STAGED_CHUNKS chunks are copied into shared memory with cp.async (16 bytes per copy, each thread
its own vectors, so its wait orders everything and no barrier is needed), then turned into x in place, read back
for the sum (four elements of every chunk at a time, the sum's element-major order) and again for the output.
Chunks beyond are recomputed from global memory (same bits; the row was just read, so mostly from L2). Keeping x
in shared memory instead of registers is what lets many CTAs share an SM, so that rows keep loading while others
reduce and store (the register version held four CTAs per SM: benchmarks/results/TARGETS.md, issue 16).

Compile-time: THREADS (picked from D by the contract, as the peer does). Runtime: rows, D, eps and alpha.
"""
from kernels.common.passes import THREAD_LEVEL

PASS_CONFIGS = {
    **THREAD_LEVEL,
    "tl.disable_thread_storage_sync": True,  # threads share only `red`, whose barriers are written out
}

# Declared in kernelkiln_contract.engram_sinkhorn (ENGRAM_SINKHORN_FINALIZE): threads, and the launch-argument names
# below, which the build checks against this PrimFunc.
VEC = 8
QUAD = 4  # elements per 16-byte vector
STAGED_CHUNKS = 5  # D = 5120 whole at 128 threads: 20 KB per CTA, 10 CTAs per SM (5 KB / 10 KB at 32 / 64 threads)


def build(p, arch):
    import tilelang.language as T

    threads = p["threads"]
    ks = STAGED_CHUNKS
    packed = not arch.startswith("sm_9")  # sm_100a and later: TileLang's fp32x2 reduction
    f32 = "float32"
    span = threads * VEC
    # CTAs per SM the registers are capped for: as many as shared memory allows (228 KB, 1 KB reserved per CTA),
    # but at least 64 registers a thread (at 48 the 64-thread variant spills)
    min_ctas = min(228 * 1024 // (4 * (ks * span + threads) + 1024), 65536 // (64 * threads))
    smem_steps = (threads // 32).bit_length() - 1  # butterfly offsets >= 32
    packed_chunks = 1 if packed else 0  # the chunk count whose sum TileLang packs two-wide on this arch
    n_m, n_r, n_c, n_o = T.dynamic("n_m, n_r, n_c, n_o")

    def fmul(a, b):
        return T.call_extern(f32, "__fmul_rn", a, b)

    def fadd(a, b):
        return T.call_extern(f32, "__fadd_rn", a, b)

    def term(s, v):
        return fadd(s, fmul(v, v)) if packed else T.call_extern(f32, "__fmaf_rn", v, v, s)

    @T.prim_func
    def engram_sinkhorn_finalize(
        matrix: T.Tensor((n_m,), f32),  # [R, D]
        row_scale: T.Tensor((n_r,), f32),  # [R]
        col_scale: T.Tensor((n_c,), f32),  # [D]
        out: T.Tensor((n_o,), f32),  # [R, D]
        num_rows: T.int32,
        head_dim: T.int32,
        eps: T.float32,
        alpha: T.float32,
    ):
        with T.Kernel(num_rows, threads=threads) as bx:
            tx = T.get_thread_binding()
            xs = T.alloc_shared((ks * span,), f32)  # the staged chunks: A, then x in place (thread-private slots)
            xq = T.alloc_local((ks * QUAD,), f32)  # one quad of every staged chunk
            c = T.alloc_local((QUAD,), f32)
            a = T.alloc_local((VEC,), f32)
            cc = T.alloc_local((VEC,), f32)
            o = T.alloc_local((VEC,), f32)
            s = T.alloc_local((2,), f32)
            v = T.alloc_local((1,), f32)
            r = T.alloc_local((1,), f32)
            k_row = T.alloc_local((1,), f32)
            red = T.alloc_shared((threads,), f32)
            chunks = head_dim // span
            groups = head_dim // VEC  # 8-column groups per row
            base = T.Cast("int64", bx) * groups + tx  # in 8-column groups
            own = tx * VEC  # the thread's offset in a chunk

            T.annotate_min_blocks_per_sm(min_ctas)
            T.pdl_sync()
            for kk in T.unroll(ks):
                if kk < chunks:
                    for h in T.unroll(2):
                        T.ptx_cp_async(T.access_ptr(xs[kk * span + own + h * QUAD], "w", QUAD),
                                       T.access_ptr(matrix[(base + kk * threads) * VEC + h * QUAD], "r", QUAD), QUAD)
            T.ptx_commit_group()
            r[0] = row_scale[bx]
            s[0] = T.float32(0)
            s[1] = T.float32(0)
            T.ptx_wait_group(0)
            T.sync_warp()  # a compiler barrier: no shared-memory read moves above the wait
            for kk in T.unroll(ks):  # x = (r * A) * c in place
                if kk < chunks:
                    for h in T.unroll(2):
                        for j in T.vectorized(QUAD):
                            c[j] = col_scale[kk * span + own + h * QUAD + j]
                        for j in T.vectorized(QUAD):
                            a[j] = xs[kk * span + own + h * QUAD + j]
                        for j in T.unroll(QUAD):
                            a[j] = fmul(fmul(r[0], a[j]), c[j])
                        for j in T.vectorized(QUAD):
                            xs[kk * span + own + h * QUAD + j] = a[j]
            for h in T.serial(2):  # the sum over elements 4h .. 4h+3 of every chunk (not unrolled: one half's registers)
                for kk in T.unroll(ks):
                    if kk < chunks:
                        for j in T.vectorized(QUAD):
                            xq[kk * QUAD + j] = xs[kk * span + own + h * QUAD + j]
                if chunks == packed_chunks:  # never true on sm_90a: two chains, even and odd elements
                    for j in T.unroll(QUAD // 2):
                        s[0] = fadd(s[0], fmul(xq[2 * j], xq[2 * j]))
                        s[1] = fadd(s[1], fmul(xq[2 * j + 1], xq[2 * j + 1]))
                else:
                    for j in T.unroll(QUAD):
                        for kk in T.unroll(ks):
                            if kk < chunks:
                                s[0] = term(s[0], xq[kk * QUAD + j])
                        for k in T.serial(ks, chunks):
                            i = h * QUAD + j
                            v[0] = fmul(fmul(r[0], matrix[(base + k * threads) * VEC + i]), col_scale[k * span + own + i])
                            s[0] = term(s[0], v[0])
            if chunks == packed_chunks:
                s[0] = fadd(s[0], s[1])
            for st in T.unroll(smem_steps):  # offsets threads/2 .. 32 through shared memory
                T.sync_threads()
                red[tx] = s[0]
                T.sync_threads()
                s[0] = fadd(s[0], red[tx ^ T.shift_right(threads // 2, st)])
            for st in T.unroll(5):  # 16 .. 1 within the warp
                s[0] = fadd(s[0], T.shfl_xor(s[0], T.shift_right(16, st)))
            k_row[0] = T.call_extern(f32, "__fdiv_rn", alpha, fadd(T.sqrt(s[0]), eps))
            for kk in T.unroll(ks):
                if kk < chunks:
                    for h in T.unroll(2):
                        for j in T.vectorized(QUAD):
                            o[h * QUAD + j] = xs[kk * span + own + h * QUAD + j]
                    for j in T.unroll(VEC):
                        o[j] = fmul(o[j], k_row[0])
                    for h in T.unroll(2):
                        for j in T.vectorized(QUAD):
                            out[(base + kk * threads) * VEC + h * QUAD + j] = o[h * QUAD + j]
            for k in T.serial(ks, chunks):
                for h in T.unroll(2):
                    for j in T.vectorized(QUAD):
                        a[h * QUAD + j] = matrix[(base + k * threads) * VEC + h * QUAD + j]
                    for j in T.vectorized(QUAD):
                        cc[h * QUAD + j] = col_scale[k * span + own + h * QUAD + j]
                for j in T.unroll(VEC):
                    o[j] = fmul(fmul(fmul(r[0], a[j]), cc[j]), k_row[0])
                for h in T.unroll(2):
                    for j in T.vectorized(QUAD):
                        out[(base + k * threads) * VEC + h * QUAD + j] = o[h * QUAD + j]
            T.pdl_trigger()

    return engram_sinkhorn_finalize
