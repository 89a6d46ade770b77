"""norm_backward: RMSNorm backward with a deterministic weight gradient (docs/SPEC.md §3.2).

Two launches instead of the peer's cooperative grid sync (which also rules out PDL):

* stage "main": a persistent grid of P CTAs (P is a runtime argument; the op uses
  CTAS_PER_SM * get_num_sms()). CTA p handles rows p, p + P, p + 2P, ... in increasing
  order; per row it writes dx and adds the row's dw terms into fp32 registers. At the
  end it stores its partial row ``partial[p, :]`` (zeros if it had no row).
* stage "reduce": ``dw[h] = sum_p partial[p, h]`` in a fixed order (below), then
  optionally ``weight_grad = round(float(weight_grad) + dw)`` in place.

Thread layout of a row as in norm_forward: thread tx holds the 16-byte chunks
``k = c * THREADS + tx``, c = 0..MAXC-1.

Numerics (mirrored bit for bit by kernelkiln.torch.norm.norm_backward_ref); every step is
one IEEE-rounded fp32 operation (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, no FMA):
* ``xh = x * rstd``; ``g = dy * wf`` with ``wf = w * out_scale`` (``out_scale`` without weight);
* ``dot``: per thread ``dot += xh * g`` over chunks c then elements, from +0; xor butterfly
  16, 8, 4, 2, 1; warp totals added in warp order;
* ``mean = dot / H``; ``dx = (g - xh * mean) * rstd`` (``+ residual_out_grad``), rounded to
  x.dtype;
* dw term ``(xh * dy) * out_scale``, accumulated per CTA in row order from +0;
* reduce: with ``per = ceil(P / 8)``, warp w sums ``partial[w*per .. min(P, (w+1)*per) - 1]``
  in increasing p from +0; the 8 warp sums are added ``((s0 + s1) + s2) + ... + s7``.

Compile-time: stage, x dtype (main) / weight_grad dtype (reduce). Runtime: sizes,
strides, P, out_scale, weight / residual_out_grad on-off and whether to accumulate.
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.quant_fused (NORM_BACKWARD): stage and dtype, and the launch-argument names of each
# stage's PrimFunc below, which the build checks against the one it lowers.
PASS_CONFIGS = THREAD_LEVEL

THREADS = {"bfloat16": 128, "float32": 256}  # per row, as in norm_forward
MAXC = 8
REDUCE_WARPS = 8


def build(p, arch):
    del arch
    return _build_main(p["dtype"]) if p["stage"] == "main" else _build_reduce(p["dtype"])


def _ops():
    import tilelang.language as T

    def op(name):
        return lambda a, b: T.call_extern("float32", name, a, b)
    return op("__fmul_rn"), op("__fadd_rn"), op("__fsub_rn"), op("__fdiv_rn")


def _build_main(x_dtype):
    import tilelang.language as T

    fmul, fadd, fsub, fdiv = _ops()
    f32 = "float32"
    vec = 8 if x_dtype == "bfloat16" else 4
    threads = THREADS[x_dtype]
    warps = threads // 32
    dy_numel, x_numel, w_numel, rstd_numel, rog_numel, dx_numel, part_numel = T.dynamic(
        "dy_numel, x_numel, w_numel, rstd_numel, rog_numel, dx_numel, part_numel")

    @T.prim_func
    def norm_backward_main(
        dy: T.Tensor((dy_numel,), x_dtype),
        x: T.Tensor((x_numel,), x_dtype),
        weight: T.Tensor((w_numel,), x_dtype),
        rstd: T.Tensor((rstd_numel,), f32),
        rog: T.Tensor((rog_numel,), x_dtype),
        dx: T.Tensor((dx_numel,), x_dtype),
        partial: T.Tensor((part_numel,), f32),
        num_tokens: T.int32,
        hidden: T.int32,
        num_ctas: T.int32,  # P
        dy_stride: T.int32,  # row strides in units of VEC elements
        x_stride: T.int32,
        rog_stride: T.int32,
        dx_stride: T.int32,
        has_weight: T.int32,
        has_rog: T.int32,
        out_scale: T.float32,
    ):
        with T.Kernel(num_ctas, threads=threads) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            warp = tx // 32
            xr = T.alloc_local((MAXC, vec), x_dtype)
            dr = T.alloc_local((MAXC, vec), x_dtype)
            rr = T.alloc_local((vec,), x_dtype)
            wr = T.alloc_local((vec,), x_dtype)
            dxl = T.alloc_local((vec,), x_dtype)
            acc = T.alloc_local((MAXC, vec), f32)
            dot = T.alloc_local((1,), f32)
            total = T.alloc_local((1,), f32)
            red = T.alloc_shared((2 * warps,), f32)  # double-buffered by row parity: one barrier per row
            nchunks = hidden // vec

            T.pdl_sync()
            for c in T.unroll(MAXC):
                for i in T.unroll(vec):
                    acc[c, i] = T.float32(0)
            for j in T.serial(T.ceildiv(num_tokens, num_ctas)):
                row = j * num_ctas + bx
                if row < num_tokens:  # uniform per CTA: the barrier below is safe
                    r64 = T.Cast("int64", row)
                    rs = rstd[row]
                    for c in T.unroll(MAXC):
                        k = c * threads + tx
                        if k < nchunks:
                            for i in T.vectorized(vec):
                                xr[c, i] = x[(r64 * x_stride + k) * vec + i]
                            for i in T.vectorized(vec):
                                dr[c, i] = dy[(r64 * dy_stride + k) * vec + i]
                        else:
                            for i in T.unroll(vec):
                                xr[c, i] = T.Cast(x_dtype, 0)
                                dr[c, i] = T.Cast(x_dtype, 0)
                    dot[0] = T.float32(0)
                    for c in T.unroll(MAXC):
                        k = c * threads + tx
                        if has_weight != 0 and k < nchunks:
                            for i in T.vectorized(vec):
                                wr[i] = weight[k * vec + i]
                        else:
                            for i in T.unroll(vec):
                                wr[i] = T.Cast(x_dtype, 0)
                        for i in T.unroll(vec):
                            wf = T.if_then_else(has_weight != 0, fmul(T.Cast(f32, wr[i]), out_scale), out_scale)
                            xh = fmul(T.Cast(f32, xr[c, i]), rs)
                            dot[0] = fadd(dot[0], fmul(xh, fmul(T.Cast(f32, dr[c, i]), wf)))
                            acc[c, i] = fadd(acc[c, i], fmul(fmul(xh, T.Cast(f32, dr[c, i])), out_scale))
                    for s in T.unroll(5):
                        dot[0] = fadd(dot[0], T.shfl_xor(dot[0], T.shift_right(16, s)))
                    if lane == 0:
                        red[(j % 2) * warps + warp] = dot[0]
                    T.sync_threads()
                    total[0] = red[(j % 2) * warps]
                    for w in T.unroll(1, warps):
                        total[0] = fadd(total[0], red[(j % 2) * warps + w])
                    mean = fdiv(total[0], T.Cast(f32, hidden))
                    for c in T.unroll(MAXC):
                        k = c * threads + tx
                        if k < nchunks:
                            if has_weight != 0:
                                for i in T.vectorized(vec):
                                    wr[i] = weight[k * vec + i]
                            if has_rog != 0:
                                for i in T.vectorized(vec):
                                    rr[i] = rog[(r64 * rog_stride + k) * vec + i]
                            for i in T.unroll(vec):
                                wf = T.if_then_else(has_weight != 0, fmul(T.Cast(f32, wr[i]), out_scale), out_scale)
                                xh = fmul(T.Cast(f32, xr[c, i]), rs)
                                g = fmul(T.Cast(f32, dr[c, i]), wf)
                                d = fmul(fsub(g, fmul(xh, mean)), rs)
                                d = T.if_then_else(has_rog != 0, fadd(d, T.Cast(f32, rr[i])), d)
                                dxl[i] = T.Cast(x_dtype, d)
                            for i in T.vectorized(vec):
                                dx[(r64 * dx_stride + k) * vec + i] = dxl[i]
            for c in T.unroll(MAXC):
                k = c * threads + tx
                if k < nchunks:
                    for i in T.vectorized(vec):
                        partial[(T.Cast("int64", bx) * nchunks + k) * vec + i] = acc[c, i]
            T.pdl_trigger()

    return norm_backward_main


def _build_reduce(wg_dtype):
    import tilelang.language as T

    _, fadd, _, _ = _ops()
    f32 = "float32"
    part_numel, wg_numel = T.dynamic("part_numel, wg_numel")
    unroll = 8  # independent loads in flight per thread

    @T.prim_func
    def norm_backward_reduce(
        partial: T.Tensor((part_numel,), f32),
        weight_grad: T.Tensor((wg_numel,), wg_dtype),
        hidden: T.int32,
        num_partials: T.int32,  # P
        accumulate: T.int32,
    ):
        with T.Kernel(T.ceildiv(hidden, 32), threads=32 * REDUCE_WARPS) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            warp = tx // 32
            s = T.alloc_local((1,), f32)
            total = T.alloc_local((1,), f32)
            vals = T.alloc_local((unroll,), f32)
            red = T.alloc_shared((32 * REDUCE_WARPS,), f32)
            col = bx * 32 + lane
            per = T.ceildiv(num_partials, REDUCE_WARPS)
            first = warp * per

            T.pdl_sync()
            s[0] = T.float32(0)
            for j in T.serial(T.ceildiv(per, unroll)):
                for u in T.unroll(unroll):
                    p = first + j * unroll + u
                    vals[u] = T.float32(0)
                    if j * unroll + u < per and p < num_partials and col < hidden:
                        vals[u] = partial[T.Cast("int64", p) * hidden + col]
                for u in T.unroll(unroll):  # out-of-range terms are +0: adding them changes nothing
                    s[0] = fadd(s[0], vals[u])
            red[tx] = s[0]
            T.sync_threads()
            if warp == 0 and col < hidden:
                total[0] = red[lane]
                for w in T.unroll(1, REDUCE_WARPS):
                    total[0] = fadd(total[0], red[w * 32 + lane])
                if accumulate != 0:
                    total[0] = fadd(T.Cast(f32, weight_grad[col]), total[0])
                weight_grad[col] = T.Cast(wg_dtype, total[0])
            T.pdl_trigger()

    return norm_backward_reduce
