"""engram_sinkhorn_finalize: the final row-normalized matrix times alpha (spec: the contract's doc,
kernelkiln_contract.engram_sinkhorn).

One CTA per row, thread level for the same reason as engram_sinkhorn_step (the peer's reduction order with a
runtime head dim D), and with the step's column layout and per-arch order of the row's sum of squares (see
kernels/engram/engram_sinkhorn_step.py): x = (r * A) * c, s = sum of x^2, k = alpha / (sqrtf(s) + eps),
out = x * k. row_scale is read, never written. x stays in registers for the first KR chunks; chunks beyond are
recomputed from global memory (same bits; the row was just read, so mostly from L2). KR = 4: 114 registers, where
6 took 162 (three CTAs of 128 threads per SM); 2 and 3 (72 / 80 registers) reread too much at D = 5120
(benchmarks/results/TARGETS.md, issue 16).

Compile-time: THREADS (picked from D by the contract, as the peer does). Runtime: rows, D, eps and alpha.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401

# Declared in kernelkiln_contract.engram_sinkhorn (ENGRAM_SINKHORN_FINALIZE): threads, and the launch-argument names
# below, which the build checks against this PrimFunc.
VEC = 8
REG_CHUNKS = {128: 4, 64: 4, 32: 4}  # KR: chunks kept in registers (see the docstring)


def build(p, arch):
    import tilelang.language as T

    threads = p["threads"]
    kr = REG_CHUNKS[threads]
    packed = not arch.startswith("sm_9")  # sm_100a and later: TileLang's fp32x2 reduction
    f32 = "float32"
    span = threads * VEC
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
            x = T.alloc_local((kr * VEC,), f32)
            a = T.alloc_local((VEC,), f32)
            c = T.alloc_local((VEC,), f32)
            o = T.alloc_local((VEC,), f32)
            s = T.alloc_local((2,), f32)
            v = T.alloc_local((1,), f32)
            r = T.alloc_local((1,), f32)
            k_row = T.alloc_local((1,), f32)
            red = T.alloc_shared((threads,), f32)
            chunks = head_dim // span
            groups = head_dim // VEC  # 8-column groups per row
            base = T.Cast("int64", bx) * groups + tx  # in 8-column groups

            T.pdl_sync()
            r[0] = row_scale[bx]
            for kk in T.unroll(kr):
                if kk < chunks:
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            a[h * 4 + j] = matrix[(base + kk * threads) * VEC + h * 4 + j]
                        for j in T.vectorized(4):
                            c[h * 4 + j] = col_scale[kk * span + tx * VEC + h * 4 + j]
                    for j in T.unroll(VEC):
                        x[kk * VEC + j] = fmul(fmul(r[0], a[j]), c[j])
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
            for st in T.unroll(smem_steps):  # offsets threads/2 .. 32 through shared memory
                T.sync_threads()
                red[tx] = s[0]
                T.sync_threads()
                s[0] = fadd(s[0], red[tx ^ T.shift_right(threads // 2, st)])
            for st in T.unroll(5):  # 16 .. 1 within the warp
                s[0] = fadd(s[0], T.shfl_xor(s[0], T.shift_right(16, st)))
            k_row[0] = T.call_extern(f32, "__fdiv_rn", alpha, fadd(T.sqrt(s[0]), eps))
            for kk in T.unroll(kr):
                if kk < chunks:
                    for j in T.unroll(VEC):
                        o[j] = fmul(x[kk * VEC + j], k_row[0])
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            out[(base + kk * threads) * VEC + h * 4 + j] = o[h * 4 + j]
            for k in T.serial(kr, chunks):
                for h in T.unroll(2):
                    for j in T.vectorized(4):
                        a[h * 4 + j] = matrix[(base + k * threads) * VEC + h * 4 + j]
                    for j in T.vectorized(4):
                        c[h * 4 + j] = col_scale[k * span + tx * VEC + h * 4 + j]
                for j in T.unroll(VEC):
                    o[j] = fmul(fmul(fmul(r[0], a[j]), c[j]), k_row[0])
                for h in T.unroll(2):
                    for j in T.vectorized(4):
                        out[(base + k * threads) * VEC + h * 4 + j] = o[h * 4 + j]
            T.pdl_trigger()

    return engram_sinkhorn_finalize
