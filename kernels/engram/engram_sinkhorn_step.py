"""engram_sinkhorn_step: one row-normalization step of the Engram Sinkhorn iteration (spec: the contract's doc,
kernelkiln_contract.engram_sinkhorn).

Thread level, because the row norm must be summed in the peer's order bit for bit and the head dim D is a runtime
argument (the peer's tile-level reduce_sum fixes D at compile time). The column layout is the peer's: with
THREADS threads and C = D / (THREADS * 8) chunks, thread t holds columns k * THREADS * 8 + t * 8 + i for chunk k
and lane element i < 8. Per row (CTA p takes rows [p * ceil(R / P), ...) in order):

* x = (r * A) * c per column, each product rounded (__fmul_rn);
* the thread's partial sum of x^2 in the order the peer's reduce_sum uses: element-major, i = 0..7 outer and
  chunk k = 0..C-1 inner, from +0. sm_90a: s = fma(x, x, s) (nvcc contracts the peer's square into the add).
  sm_100a: s = s + round(x * x) (the peer's packed fp32x2 square is not contracted), and with C = 1 two chains,
  even and odd i, summed even + odd (TileLang packs that reduction two-wide);
* the threads' sums by a xor butterfly from offset THREADS / 2 down to 1 (offsets >= 32 through shared memory),
  as tl::AllReduce does;
* norm = sqrtf(s); inv = 1 / (norm + eps); row_norm = norm; row_scale = r * inv;
* col_acc[col] = fma(x * inv, x * inv, col_acc[col]) in row order from +0; stored as the CTA's partial row (zeros
  for a CTA without rows).

x and col_acc live in registers for the first KR chunks (unrolled, guarded by C), their column scales in shared
memory (each thread reads back only the slots it wrote, so no barrier); chunks beyond KR recompute x from global
memory (same bits) and accumulate directly in the CTA's own partial row (thread-private addresses), so any D that
is a multiple of THREADS * 8 runs, at the cost of extra traffic for rows longer than KR chunks.

Compile-time: THREADS (it decides the reduction order; the contract's select rule picks it from D as the peer
does). Runtime: rows, D, the partial count P and eps.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401

# Declared in kernelkiln_contract.engram_sinkhorn (ENGRAM_SINKHORN_STEP): threads, and the launch-argument names
# below, which the build checks against this PrimFunc.
VEC = 8
REG_CHUNKS = {128: 5, 64: 6, 32: 6}  # KR: chunks kept in registers (3 CTAs per SM must fit the register file)
CTAS_PER_SM = 3  # the op launches 3 CTAs per SM (kernelkiln_contract.engram_sinkhorn): one wave


def build(p, arch):
    import tilelang.language as T

    threads = p["threads"]
    kr = REG_CHUNKS[threads]
    packed = not arch.startswith("sm_9")  # sm_100a and later: TileLang's fp32x2 reduction
    f32 = "float32"
    span = threads * VEC
    smem_steps = (threads // 32).bit_length() - 1  # butterfly offsets >= 32
    packed_chunks = 1 if packed else 0  # the chunk count whose sum TileLang packs two-wide on this arch
    n_m, n_r, n_c, n_n, n_p = T.dynamic("n_m, n_r, n_c, n_n, n_p")

    def fmul(a, b):
        return T.call_extern(f32, "__fmul_rn", a, b)

    def fadd(a, b):
        return T.call_extern(f32, "__fadd_rn", a, b)

    def fma(a, b, c):
        return T.call_extern(f32, "__fmaf_rn", a, b, c)

    def term(s, v):  # one element of the thread's sum of squares, as the peer's reduce_sum compiles on this arch
        return fadd(s, fmul(v, v)) if packed else fma(v, v, s)

    @T.prim_func
    def engram_sinkhorn_step(
        matrix: T.Tensor((n_m,), f32),  # [R, D]
        row_scale: T.Tensor((n_r,), f32),  # [R], updated in place
        col_scale: T.Tensor((n_c,), f32),  # [D]
        row_norm: T.Tensor((n_n,), f32),  # [R]
        col_sumsq_partial: T.Tensor((n_p,), f32),  # [P, D]
        num_rows: T.int32,
        head_dim: T.int32,
        num_ctas: T.int32,  # P
        eps: T.float32,
    ):
        with T.Kernel(num_ctas, threads=threads) as bx:
            tx = T.get_thread_binding()
            x = T.alloc_local((kr * VEC,), f32)
            acc = T.alloc_local((kr * VEC,), f32)
            cs = T.alloc_shared((kr * span,), f32)  # the register chunks' column scales (thread-private slots)
            a = T.alloc_local((VEC,), f32)
            c = T.alloc_local((VEC,), f32)
            pa = T.alloc_local((VEC,), f32)
            s = T.alloc_local((2,), f32)
            v = T.alloc_local((1,), f32)
            r = T.alloc_local((1,), f32)
            inv = T.alloc_local((1,), f32)
            red = T.alloc_shared((threads,), f32)
            chunks = head_dim // span
            groups = head_dim // VEC  # 8-column groups per row
            rows_per_cta = T.ceildiv(num_rows, num_ctas)
            lo = T.min(rows_per_cta * bx, num_rows)
            hi = T.min(rows_per_cta * (bx + 1), num_rows)
            prow = T.Cast("int64", bx) * groups + tx  # in 8-column groups

            T.annotate_min_blocks_per_sm(CTAS_PER_SM)
            T.pdl_sync()
            for j in T.unroll(kr * VEC):
                acc[j] = T.float32(0)
            for kk in T.unroll(kr):  # read once per CTA; no barrier: each thread reads back only its own slots
                if kk < chunks:
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            cs[kk * span + tx * VEC + h * 4 + j] = col_scale[kk * span + tx * VEC + h * 4 + j]
            for k in T.serial(kr, chunks):  # the beyond-register chunks accumulate in place: start them at +0
                for h in T.unroll(2):
                    for j in T.vectorized(4):
                        col_sumsq_partial[(prow + k * threads) * VEC + h * 4 + j] = T.float32(0)
            for row in T.serial(lo, hi):
                r[0] = row_scale[row]
                base = T.Cast("int64", row) * groups + tx  # in 8-column groups
                for kk in T.unroll(kr):
                    if kk < chunks:
                        for h in T.unroll(2):
                            for j in T.vectorized(4):
                                x[kk * VEC + h * 4 + j] = matrix[(base + kk * threads) * VEC + h * 4 + j]
                        for j in T.unroll(VEC):
                            x[kk * VEC + j] = fmul(fmul(r[0], x[kk * VEC + j]), cs[kk * span + tx * VEC + j])
                s[0] = T.float32(0)
                s[1] = T.float32(0)
                if chunks == packed_chunks:  # never true on sm_90a (packed_chunks = 0, chunks >= 1)
                    for j in T.unroll(VEC // 2):
                        s[0] = fadd(s[0], fmul(x[2 * j], x[2 * j]))
                        s[1] = fadd(s[1], fmul(x[2 * j + 1], x[2 * j + 1]))
                    s[0] = fadd(s[0], s[1])
                else:
                    for i in T.unroll(VEC):
                        for kk in T.unroll(kr):
                            if kk < chunks:
                                s[0] = term(s[0], x[kk * VEC + i])
                        for k in T.serial(kr, chunks):
                            v[0] = fmul(fmul(r[0], matrix[(base + k * threads) * VEC + i]), col_scale[k * span + tx * VEC + i])
                            s[0] = term(s[0], v[0])
                for o in T.unroll(smem_steps):  # offsets threads/2 .. 32 through shared memory
                    T.sync_threads()
                    red[tx] = s[0]
                    T.sync_threads()
                    s[0] = fadd(s[0], red[tx ^ T.shift_right(threads // 2, o)])
                for o in T.unroll(5):  # 16 .. 1 within the warp
                    s[0] = fadd(s[0], T.shfl_xor(s[0], T.shift_right(16, o)))
                s[1] = T.sqrt(s[0])
                inv[0] = T.call_extern(f32, "__fdiv_rn", T.float32(1), fadd(s[1], eps))
                if tx == 0:
                    row_norm[row] = s[1]
                    row_scale[row] = fmul(r[0], inv[0])
                for kk in T.unroll(kr):
                    if kk < chunks:
                        for j in T.unroll(VEC):
                            xi = fmul(x[kk * VEC + j], inv[0])
                            acc[kk * VEC + j] = fma(xi, xi, acc[kk * VEC + j])
                for k in T.serial(kr, chunks):
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            a[h * 4 + j] = matrix[(base + k * threads) * VEC + h * 4 + j]
                        for j in T.vectorized(4):
                            c[h * 4 + j] = col_scale[k * span + tx * VEC + h * 4 + j]
                        for j in T.vectorized(4):
                            pa[h * 4 + j] = col_sumsq_partial[(prow + k * threads) * VEC + h * 4 + j]
                    for j in T.unroll(VEC):
                        xi = fmul(fmul(fmul(r[0], a[j]), c[j]), inv[0])
                        pa[j] = fma(xi, xi, pa[j])
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            col_sumsq_partial[(prow + k * threads) * VEC + h * 4 + j] = pa[h * 4 + j]
            for kk in T.unroll(kr):
                if kk < chunks:
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            col_sumsq_partial[(prow + kk * threads) * VEC + h * 4 + j] = acc[kk * VEC + h * 4 + j]
            T.pdl_trigger()

    return engram_sinkhorn_step
