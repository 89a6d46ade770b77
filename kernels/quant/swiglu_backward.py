"""swiglu_backward[_and_per_token_cast]: SwiGLU backward over the expert-major layout (docs/SPEC.md §3.2, §4.11).

Per element, with a = gate (left half of x [N, 2I]), u = up (right half), dy =
act_x_grad and w_eff = w * rsf (1 without weights), each fp32 step one IEEE-rounded
intrinsic in the order of ``kernelkiln.torch.swiglu.swiglu_backward`` (no FMA
contraction can change it):

    clamp (flags from the unclamped values): a <= c; -c <= u <= c
    e = expf(-a); d = 1 + e; s = 1 / d; gws = (dy * w_eff) * s
    dgate = (gws * u) * (a * (1 - s) + 1)     (0 where a was clamped)
    dup   = gws * a                           (0 where u was clamped)
    act   = (a / d) * u;  act_out = act * w_eff;  weight_grad = sum(dy * act) * rsf

FP8 input (e4m3 with fp32 1 x g scales) is dequantized on the fly (one product,
q * sf); the fp32 gradient [dgate | dup] is written as bf16 and per-token
quantized to e4m3 exactly like per_token_cast of the fp32 gradient. Without
quantization the gradient and act_out are stored in the output dtype.

Mapping: one warp per row, 4 rows per CTA; the warp walks the row in chunks of
512 columns, lane l owning columns [512k + 16l, 512k + 16l + 16) of chunk k (all
16-byte loads/stores). weight_grad is deterministic: each lane sums its columns in
increasing order starting from 0.0, then a butterfly (xor 16, 8, 4, 2, 1) adds the
lane sums; the reference reproduces exactly this order. The next chunk is
prefetched into L2 while the current one computes.

Padding rows (outside every expert's [align(psum[e-1], A), psum[e]), rows past
the last expert included) read nothing and get zeros in every output (scales too).

Compile-time: x dtype, act_x_grad dtype, output format, channels per scale block,
scale storage. Runtime: N, I, strides, psum/expert count/alignment, weights and rsf,
clamp on/off and value, recompute, round_sf, amax floor.
"""
from kernels.common.cuda_source import guarded
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.quant_fused (SWIGLU_BACKWARD): the compile-time parameters, their constraints,
# and the launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL

WARPS_PER_CTA = 4
VEC = 16  # columns per lane per chunk
CHUNK = 32 * VEC
SF_STORAGE = {"fp32": "float32", "ue8m0": "uint8", "none": "float32"}
E4M3_MAX = 448.0
BYTES = {"float8_e4m3fn": 1, "bfloat16": 2, "float32": 4}

PREFETCH_SOURCE = guarded("prefetch_l2", """
__device__ __forceinline__ int tk_prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" : : "l"(p) : "memory");
    return 0;
}
""")


def build(p, arch):
    import tilelang.language as T

    from kernels.common.block_scale import fp32_scale, ue8m0_scale

    del arch
    x_dtype, grad_dtype, fmt, g, sf_kind = p["x_dtype"], p["grad_dtype"], p["fmt"], p["num_per_channels"], p["sf_kind"]
    quant = fmt == "e4m3"
    out_dtype = "bfloat16" if quant else fmt  # x_grad / act_out
    x_epu, g_epu, o_epu = (16 // BYTES[d] for d in (x_dtype, grad_dtype, out_dtype))  # elements per 16 bytes
    sf_storage = SF_STORAGE[sf_kind]
    if quant:
        lanes_per_block = g // VEC
        shuffle_steps = lanes_per_block.bit_length() - 1
    x_numel, xsf_numel, dy_numel, w_numel, psum_numel = T.dynamic("x_numel, xsf_numel, dy_numel, w_numel, psum_numel")
    xg_numel, q_numel, sf_numel, wg_numel, ao_numel = T.dynamic("xg_numel, q_numel, sf_numel, wg_numel, ao_numel")

    def fmul(a, b):
        return T.call_extern("float32", "__fmul_rn", a, b)

    def fadd(a, b):
        return T.call_extern("float32", "__fadd_rn", a, b)

    def fdiv(a, b):
        return T.call_extern("float32", "__fdiv_rn", a, b)

    @T.prim_func
    def swiglu_backward(
        x: T.Tensor((x_numel,), x_dtype),
        x_sf: T.Tensor((xsf_numel,), "float32"),
        act_x_grad: T.Tensor((dy_numel,), grad_dtype),
        weights: T.Tensor((w_numel,), "float32"),
        psum: T.Tensor((psum_numel,), "int32"),
        x_grad: T.Tensor((xg_numel,), out_dtype),
        q: T.Tensor((q_numel,), "float8_e4m3fn"),
        sf: T.Tensor((sf_numel,), sf_storage),
        weight_grad: T.Tensor((wg_numel,), "float32"),
        act_out: T.Tensor((ao_numel,), out_dtype),
        num_rows: T.int32,
        hidden_div64: T.int32,  # I / 64
        x_stride_u: T.int32,  # row strides in 16-byte units
        dy_stride_u: T.int32,
        x_sf_stride: T.int32,  # row stride of x_sf in elements
        num_experts: T.int32,  # 0: no psum, every row is valid
        alignment: T.int32,
        with_weight: T.int32,
        rsf: T.float32,  # routed scaling factor, 1.0 when absent
        use_clamp: T.int32,
        clamp_value: T.float32,
        do_recompute: T.int32,
        sf_stride_t: T.int32,
        sf_stride_k: T.int32,
        round_sf: T.int32,
        clamp_min: T.float32,
    ):
        with T.Kernel(T.ceildiv(num_rows, WARPS_PER_CTA), threads=32 * WARPS_PER_CTA) as bx:
            T.import_source(PREFETCH_SOURCE)
            tx = T.get_thread_binding()
            lane = tx % 32
            row = bx * WARPS_PER_CTA + tx // 32
            hidden = hidden_div64 * 64
            gate = T.alloc_local((VEC,), x_dtype)
            up = T.alloc_local((VEC,), x_dtype)
            dy = T.alloc_local((VEC,), grad_dtype)
            dg = T.alloc_local((VEC,), "float32")
            du = T.alloc_local((VEC,), "float32")
            ao = T.alloc_local((VEC,), "float32")
            ob = T.alloc_local((VEC,), out_dtype)
            qb = T.alloc_local((VEC,), "float8_e4m3fn")
            valid = T.alloc_local((1,), "int32")
            expert = T.alloc_local((1,), "int32")
            prev = T.alloc_local((1,), "int32")
            pv = T.alloc_local((1,), "int32")
            w = T.alloc_local((1,), "float32")
            acc = T.alloc_local((1,), "float32")
            xs = T.alloc_local((2,), "float32")
            a = T.alloc_local((1,), "float32")
            u = T.alloc_local((1,), "float32")
            amax = T.alloc_local((1,), "float32")
            flags = T.alloc_local((2,), "int32")  # gate / up clamped, taken before clamping
            t = T.alloc_local((4,), "float32")  # d, s, gws, act

            T.pdl_sync()
            valid[0] = T.Cast("int32", row < num_rows)
            if num_experts > 0:
                # expert = #experts whose end offset is <= row: one ballot per 32 experts.
                expert[0] = 0
                for c in T.serial(T.ceildiv(num_experts, 32)):
                    pv[0] = T.int32(2147483647)
                    if c * 32 + lane < num_experts:
                        pv[0] = psum[c * 32 + lane]
                    expert[0] = expert[0] + T.call_extern(
                        "int32", "__popc", T.call_extern("uint32", "__ballot_sync", T.uint32(0xFFFFFFFF),
                                                         T.Cast("int32", pv[0] <= row)))
                prev[0] = 0
                if expert[0] > 0 and expert[0] < num_experts:
                    prev[0] = psum[expert[0] - 1]
                valid[0] = T.Cast("int32", valid[0] != 0 and expert[0] < num_experts and
                                  row >= T.ceildiv(prev[0], alignment) * alignment)
            w[0] = T.float32(0)  # padding rows: every product below is +0
            if valid[0] != 0:
                w[0] = T.float32(1)
                if with_weight != 0:
                    w[0] = fmul(weights[row], rsf)
            acc[0] = T.float32(0)
            xs[0] = T.float32(1)
            xs[1] = T.float32(1)

            num_chunks = T.ceildiv(hidden, CHUNK)
            for k in T.serial(num_chunks):
                col = k * CHUNK + lane * VEC
                col_ok = col < hidden
                xbase = T.Cast("int64", row) * x_stride_u * x_epu + col
                dbase = T.Cast("int64", row) * dy_stride_u * g_epu + col
                if valid[0] != 0 and col_ok:
                    for h in T.unroll(VEC // x_epu):
                        for i in T.vectorized(x_epu):
                            gate[h * x_epu + i] = x[xbase + h * x_epu + i]
                    for h in T.unroll(VEC // x_epu):
                        for i in T.vectorized(x_epu):
                            up[h * x_epu + i] = x[xbase + hidden + h * x_epu + i]
                    for h in T.unroll(VEC // g_epu):
                        for i in T.vectorized(g_epu):
                            dy[h * g_epu + i] = act_x_grad[dbase + h * g_epu + i]
                    if quant:
                        xs[0] = x_sf[T.Cast("int64", row) * x_sf_stride + col // g]
                        xs[1] = x_sf[T.Cast("int64", row) * x_sf_stride + (hidden // g) + col // g]
                else:
                    for i in T.unroll(VEC):
                        gate[i] = T.Cast(x_dtype, 0)
                        up[i] = T.Cast(x_dtype, 0)
                        dy[i] = T.Cast(grad_dtype, 0)
                if valid[0] != 0 and col + CHUNK < hidden:
                    T.call_extern("int32", "tk_prefetch_l2", T.address_of(x[xbase + CHUNK]))
                    T.call_extern("int32", "tk_prefetch_l2", T.address_of(x[xbase + hidden + CHUNK]))
                    T.call_extern("int32", "tk_prefetch_l2", T.address_of(act_x_grad[dbase + CHUNK]))

                for i in T.unroll(VEC):
                    if quant:
                        a[0] = fmul(T.Cast("float32", gate[i]), xs[0])
                        u[0] = fmul(T.Cast("float32", up[i]), xs[1])
                    else:
                        a[0] = T.Cast("float32", gate[i])
                        u[0] = T.Cast("float32", up[i])
                    flags[0] = 0
                    flags[1] = 0
                    if use_clamp != 0:
                        flags[0] = T.Cast("int32", a[0] > clamp_value)
                        flags[1] = T.Cast("int32", u[0] > clamp_value or u[0] < -clamp_value)
                        # Selects, not min/max: NaN stays NaN, as in the reference's torch.where.
                        a[0] = T.if_then_else(a[0] > clamp_value, clamp_value, a[0])
                        u[0] = T.if_then_else(u[0] > clamp_value, clamp_value,
                                              T.if_then_else(u[0] < -clamp_value, -clamp_value, u[0]))
                    t[0] = fadd(T.float32(1), T.call_extern("float32", "expf", -a[0]))  # d
                    t[1] = fdiv(T.float32(1), t[0])  # s
                    t[2] = fmul(fmul(T.Cast("float32", dy[i]), w[0]), t[1])  # gws
                    dg[i] = T.if_then_else(flags[0] != 0, T.float32(0), fmul(fmul(t[2], u[0]), fadd(
                        fmul(a[0], T.call_extern("float32", "__fsub_rn", T.float32(1), t[1])), T.float32(1))))
                    du[i] = T.if_then_else(flags[1] != 0, T.float32(0), fmul(t[2], a[0]))
                    t[3] = fmul(fdiv(a[0], t[0]), u[0])  # act
                    ao[i] = fmul(t[3], w[0])
                    acc[0] = T.if_then_else(col_ok, fadd(acc[0], fmul(T.Cast("float32", dy[i]), t[3])), acc[0])

                store_ok = row < num_rows
                xg_base = T.Cast("int64", row) * hidden * 2 + col
                for half in T.unroll(2):
                    # half 0: gate gradient (columns [0, I)), half 1: up gradient ([I, 2I)).
                    for h in T.unroll(VEC // 2):
                        for i in T.vectorized(2):
                            ob[h * 2 + i] = T.Cast(out_dtype, T.if_then_else(half == 0, dg[h * 2 + i], du[h * 2 + i]))
                    if store_ok and col_ok:
                        for h in T.unroll(VEC // o_epu):
                            for i in T.vectorized(o_epu):
                                x_grad[xg_base + half * hidden + h * o_epu + i] = ob[h * o_epu + i]
                    if quant:
                        amax[0] = T.float32(0)
                        for i in T.unroll(VEC):
                            amax[0] = T.max(amax[0], T.abs(T.if_then_else(half == 0, dg[i], du[i])))
                        for st in T.unroll(shuffle_steps):
                            amax[0] = T.max(amax[0], T.shfl_xor(amax[0], T.shift_right(lanes_per_block // 2, st)))
                        amax[0] = T.max(amax[0], clamp_min)
                        kb = half * (hidden // g) + col // g
                        writer = store_ok and col_ok and lane % lanes_per_block == 0
                        if sf_kind == "fp32":
                            sf_val, inv = fp32_scale(amax[0], round_sf, E4M3_MAX)
                            if writer:
                                sf[T.Cast("int64", row) * sf_stride_t + kb * sf_stride_k] = T.if_then_else(
                                    valid[0] != 0, sf_val, T.float32(0))
                        else:
                            byte, inv = ue8m0_scale(amax[0], E4M3_MAX)
                            if writer:
                                sf[T.Cast("int64", row) * sf_stride_t + (kb // 4) * sf_stride_k + kb % 4] = \
                                    T.if_then_else(valid[0] != 0, byte, T.uint8(0))
                        for h in T.unroll(VEC // 2):
                            for i in T.vectorized(2):
                                qb[h * 2 + i] = T.Cast("float8_e4m3fn",
                                                       T.if_then_else(half == 0, dg[h * 2 + i], du[h * 2 + i]) * inv)
                        if store_ok and col_ok:
                            for i in T.vectorized(16):
                                q[xg_base + half * hidden + i] = qb[i]
                if do_recompute != 0 and store_ok and col_ok:
                    for h in T.unroll(VEC // 2):
                        for i in T.vectorized(2):
                            ob[h * 2 + i] = T.Cast(out_dtype, ao[h * 2 + i])
                    for h in T.unroll(VEC // o_epu):
                        for i in T.vectorized(o_epu):
                            act_out[T.Cast("int64", row) * hidden + col + h * o_epu + i] = ob[h * o_epu + i]

            if with_weight != 0:
                for st in T.unroll(5):
                    acc[0] = fadd(acc[0], T.shfl_xor(acc[0], 16 >> st))
                if lane == 0 and row < num_rows:
                    weight_grad[row] = T.if_then_else(valid[0] != 0, fmul(acc[0], rsf), T.float32(0))
            T.pdl_trigger()

    return swiglu_backward
