"""swiglu_forward[_and_per_token_cast]: fused SwiGLU over the expert-major layout (docs/SPEC.md §3.2, §4.11).

y = silu(min(g, c)) * clamp(u, -c, c) * (w * rsf) in fp32, gate g = left half of
each row of x [N, 2I], up u = right half; then either stored as bf16/fp32 or
per-token quantized to e4m3 (1 x g blocks) exactly like per_token_cast of the
fp32 y. Each fp32 step is one IEEE-rounded intrinsic, in the order of
``kernelkiln.torch.swiglu.swiglu_forward`` (no FMA contraction can change it):

    e = expf(-g); d = 1 + e; s = g / d; y = s * u; y = y * w_eff;  w_eff = w * rsf

Rows outside every expert's range [align(psum[e-1], A), psum[e]) are padding
and left unwritten. A warp finds each row's expert with one ballot per 32
experts (no dependent binary-search loads).

Compile-time: input dtype, output format, channels per scale block, scale
storage. Runtime: N, I, strides, psum/expert count/alignment, weights and rsf
(1.0 when absent: multiplying by 1.0 is exact), clamp on/off and value, clamp
counting, round_sf, amax floor.

Thread mapping as in per_token_cast: a warp covers 32*VEC consecutive output
channels of R rows (16-byte loads of the gate and the up half); the lanes of a
scale block reduce the amax with xor shuffles. Clamp counts are reduced per
warp and added with one int64 atomic per nonzero counter (integers: exact and
order-independent); counts[3] (valid rows x I) is computed once from psum.
"""
from kernels.common.cuda_source import guarded
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.quant_fused (SWIGLU_FORWARD): the compile-time parameters, their constraints, and
# the launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL

WARPS_PER_CTA = 4
QUANT_FMTS = ("e4m3",)
SF_STORAGE = {"fp32": "float32", "ue8m0": "uint8", "none": "float32"}
E4M3_MAX = 448.0

# int64 clamp counters through an unsigned 64-bit atomic (two's complement: same bits).
COUNT_SOURCE = guarded("count_add", """
__device__ __forceinline__ int tk_count_add(void* p, int v, int mul) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)((long long)v * (long long)mul));
    return 0;
}
""")


def elems_per_load(in_dtype):
    return 4 if in_dtype == "float32" else 8


def build(p, arch):
    import tilelang.language as T

    from kernels.common.block_scale import fp32_scale, ue8m0_scale

    del arch
    in_dtype, fmt, g, sf_kind, rows = p["in_dtype"], p["fmt"], p["num_per_channels"], p["sf_kind"], p["rows"]
    quant = fmt in QUANT_FMTS
    vec = elems_per_load(in_dtype)
    seg = 32 * vec
    out_storage = "float8_e4m3fn" if quant else fmt
    sf_storage = SF_STORAGE[sf_kind]
    if quant:
        lanes_per_block = g // vec
        shuffle_steps = lanes_per_block.bit_length() - 1
        spread = lanes_per_block >= rows
        scalar_iters = 1 if spread else rows
        store_lanes = rows if spread else 1
    x_numel, out_numel, sf_numel, psum_numel, w_numel = T.dynamic("x_numel, out_numel, sf_numel, psum_numel, w_numel")

    def fmul(a, b):
        return T.call_extern("float32", "__fmul_rn", a, b)

    @T.prim_func
    def swiglu_forward(
        x: T.Tensor((x_numel,), in_dtype),
        out: T.Tensor((out_numel,), out_storage),
        sf: T.Tensor((sf_numel,), sf_storage),
        psum: T.Tensor((psum_numel,), "int32"),
        weights: T.Tensor((w_numel,), "float32"),
        counts: T.Tensor((4,), "int64"),
        num_rows: T.int32,
        hidden_div64: T.int32,  # I / 64
        x_stride_vec: T.int32,  # row stride of x in units of vec elements
        num_experts: T.int32,  # 0: no psum, every row is valid
        alignment: T.int32,
        with_weight: T.int32,
        rsf: T.float32,  # routed scaling factor, 1.0 when absent
        use_clamp: T.int32,
        clamp_value: T.float32,
        count_clamp: T.int32,
        sf_stride_t: T.int32,
        sf_stride_k: T.int32,
        round_sf: T.int32,
        clamp_min: T.float32,
    ):
        with T.Kernel(T.ceildiv(num_rows, rows), T.ceildiv(hidden_div64 * 64, seg * WARPS_PER_CTA),
                      threads=32 * WARPS_PER_CTA) as (bx, by):
            T.import_source(COUNT_SOURCE)
            tx = T.get_thread_binding()
            lane = tx % 32
            hidden = hidden_div64 * 64
            col = (by * WARPS_PER_CTA + tx // 32) * seg + lane * vec
            col_ok = col < hidden
            gate = T.alloc_local((rows, vec), in_dtype)
            up = T.alloc_local((rows, vec), in_dtype)
            y = T.alloc_local((rows, vec), "float32")
            valid = T.alloc_local((rows,), "int32")
            expert = T.alloc_local((rows,), "int32")
            prev = T.alloc_local((rows,), "int32")
            w = T.alloc_local((rows,), "float32")
            cnt = T.alloc_local((4,), "int32")
            pv = T.alloc_local((2,), "int32")
            a = T.alloc_local((1,), "float32")
            u = T.alloc_local((1,), "float32")
            amax = T.alloc_local((rows,), "float32")
            my_amax = T.alloc_local((1,), "float32")
            my_ok = T.alloc_local((1,), "int32")
            inv = T.alloc_local((1,), "float32")
            sf_inv = T.alloc_local((rows,), "float32")
            q = T.alloc_local((vec,), out_storage)

            T.pdl_sync()
            for r in T.unroll(rows):
                valid[r] = T.Cast("int32", bx * rows + r < num_rows)
                expert[r] = 0
            if num_experts > 0:
                # expert[r] = #experts whose end offset is <= row: the first expert with psum > row.
                for c in T.serial(T.ceildiv(num_experts, 32)):
                    pv[0] = T.int32(2147483647)
                    if c * 32 + lane < num_experts:
                        pv[0] = psum[c * 32 + lane]
                    for r in T.unroll(rows):
                        expert[r] = expert[r] + T.call_extern(
                            "int32", "__popc", T.call_extern("uint32", "__ballot_sync", T.uint32(0xFFFFFFFF),
                                                             T.Cast("int32", pv[0] <= bx * rows + r)))
                for r in T.unroll(rows):
                    prev[r] = 0
                    if expert[r] > 0 and expert[r] < num_experts:
                        prev[r] = psum[expert[r] - 1]
                    valid[r] = T.Cast("int32", valid[r] != 0 and expert[r] < num_experts and
                                      bx * rows + r >= T.ceildiv(prev[r], alignment) * alignment)

            for r in T.unroll(rows):
                row = bx * rows + r
                w[r] = T.float32(1)
                if valid[r] != 0 and col_ok:
                    base = T.Cast("int64", row) * x_stride_vec * vec + col
                    for i in T.vectorized(vec):
                        gate[r, i] = x[base + i]
                    for i in T.vectorized(vec):
                        up[r, i] = x[base + hidden + i]
                    if with_weight != 0:
                        w[r] = fmul(weights[row], rsf)
                else:
                    for i in T.unroll(vec):
                        gate[r, i] = T.Cast(in_dtype, 0)
                        up[r, i] = T.Cast(in_dtype, 0)

            for k in T.unroll(4):
                cnt[k] = 0
            for r in T.unroll(rows):
                for i in T.unroll(vec):
                    a[0] = T.Cast("float32", gate[r, i])
                    u[0] = T.Cast("float32", up[r, i])
                    if use_clamp != 0:
                        # Selects on the counted predicates: NaN stays NaN (torch.clamp), is never counted.
                        cnt[0] = cnt[0] + T.Cast("int32", a[0] > clamp_value)
                        cnt[1] = cnt[1] + T.Cast("int32", u[0] > clamp_value)
                        cnt[2] = cnt[2] + T.Cast("int32", u[0] < -clamp_value)
                        a[0] = T.if_then_else(a[0] > clamp_value, clamp_value, a[0])
                        u[0] = T.if_then_else(u[0] > clamp_value, clamp_value,
                                              T.if_then_else(u[0] < -clamp_value, -clamp_value, u[0]))
                    d = T.call_extern("float32", "__fadd_rn", T.float32(1),
                                      T.call_extern("float32", "expf", -a[0]))
                    y[r, i] = fmul(fmul(T.call_extern("float32", "__fdiv_rn", a[0], d), u[0]), w[r])

            if count_clamp != 0:
                # Padding and out-of-range lanes loaded zeros, which never exceed a clamp >= 0.
                for k in T.unroll(3):
                    for s in T.unroll(5):
                        cnt[k] = cnt[k] + T.shfl_xor(cnt[k], 16 >> s)
                    if lane == 0 and cnt[k] != 0:
                        T.call_extern("int32", "tk_count_add", T.address_of(counts[k]), cnt[k], 1)
                if bx == 0 and by == 0 and tx < 32:
                    # counts[3] = valid rows x I, once per launch, from psum by one warp.
                    cnt[3] = 0
                    if num_experts > 0:
                        for c in T.serial(T.ceildiv(num_experts, 32)):
                            e = c * 32 + lane
                            if e < num_experts:
                                pv[0] = 0
                                if e > 0:
                                    pv[0] = T.ceildiv(psum[e - 1], alignment) * alignment
                                pv[1] = T.min(psum[e], num_rows)
                                if pv[1] > pv[0]:
                                    cnt[3] = cnt[3] + pv[1] - pv[0]
                        for s in T.unroll(5):
                            cnt[3] = cnt[3] + T.shfl_xor(cnt[3], 16 >> s)
                    else:
                        cnt[3] = num_rows
                    if lane == 0:  # valid rows x I can exceed int32: multiplied in int64
                        T.call_extern("int32", "tk_count_add", T.address_of(counts[3]), cnt[3], hidden)
            if quant:
                for r in T.unroll(rows):
                    amax[r] = T.float32(0)
                    for i in T.unroll(vec):
                        amax[r] = T.max(amax[r], T.abs(y[r, i]))
                    for s in T.unroll(shuffle_steps):
                        amax[r] = T.max(amax[r], T.shfl_xor(amax[r], T.shift_right(lanes_per_block // 2, s)))
                    amax[r] = T.max(amax[r], clamp_min)
                # Scale math spread over the lanes of a block (one row each), then shuffled back.
                kb = col // g
                sub = lane % lanes_per_block
                for j in T.unroll(scalar_iters):
                    if spread:
                        my_r = sub % rows
                    else:
                        my_r = j
                    # Nested selects, not an if-chain: nvcc turns the latter into an indexed
                    # (local-memory) load of amax/valid.
                    my_amax[0] = amax[rows - 1]
                    my_ok[0] = valid[rows - 1]
                    for r in T.unroll(rows - 1):
                        my_amax[0] = T.if_then_else(my_r == rows - 2 - r, amax[rows - 2 - r], my_amax[0])
                        my_ok[0] = T.if_then_else(my_r == rows - 2 - r, valid[rows - 2 - r], my_ok[0])
                    writer = col_ok and sub < store_lanes and my_ok[0] != 0
                    my_row = bx * rows + my_r
                    if sf_kind == "fp32":
                        sf_val, inv_val = fp32_scale(my_amax[0], round_sf, E4M3_MAX)
                        inv[0] = inv_val
                        if writer:
                            sf[T.Cast("int64", my_row) * sf_stride_t + kb * sf_stride_k] = sf_val
                    else:
                        byte, inv_val = ue8m0_scale(my_amax[0], E4M3_MAX)
                        inv[0] = inv_val
                        if writer:
                            sf[T.Cast("int64", my_row) * sf_stride_t + (kb // 4) * sf_stride_k + kb % 4] = byte
                    if spread:
                        for r in T.unroll(rows):
                            sf_inv[r] = T.shfl_sync(inv[0], lane - sub + r)
                    else:
                        sf_inv[j] = inv[0]

            for r in T.unroll(rows):
                row = bx * rows + r
                if valid[r] != 0 and col_ok:
                    # Pairs (cvt.satfinite.e4m3x2 / bf16x2), fully unrolled so y stays in registers.
                    for h in T.unroll(vec // 2):
                        for i in T.vectorized(2):
                            if quant:
                                q[h * 2 + i] = T.Cast("float8_e4m3fn", y[r, h * 2 + i] * sf_inv[r])
                            else:
                                q[h * 2 + i] = T.Cast(out_storage, y[r, h * 2 + i])
                    for i in T.vectorized(vec):
                        out[T.Cast("int64", row) * hidden + col + i] = q[i]
            T.pdl_trigger()

    return swiglu_forward
