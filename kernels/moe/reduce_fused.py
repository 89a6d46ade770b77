"""reduce_fused (v1): weighted combine of expert-major rows back to token order (docs/SPEC.md §3.1).

One CTA per token; thread tx holds the 16-byte chunks ``c = j * 128 + tx`` of a row segment
(CPT chunks, 64 fp32 accumulators per thread). Numerics (mirrored by
``kernelkiln.torch.fused.reduce_fused``): ``acc = +0``; for k = 0..K-1 with pos_k >= 0,
``s = w_k`` (1 without weights), ``s = s * x_sf[pos_k]`` (with per-row scales), then
``acc = fma(float(x[pos_k]), s, acc)`` (one rounding, ``__fmaf_rn``). Finally ``acc * sf``
(sf = 1.0 when absent, an exact identity) and a cast: RNE to bf16, or saturating RNE to e4m3.

Compile-time: (in_dtype, out_dtype). Runtime: sizes, K, whether weights / x_sf / sf exist.
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.moe (REDUCE_FUSED): the (in_dtype, out_dtype) pairs that may be built, and the
# launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL
BYTES = {"bfloat16": 2, "float32": 4, "float8_e4m3fn": 1}
THREADS = 128
ACC_PER_THREAD = 64


def build(p, arch):
    import tilelang.language as T

    del arch
    din, dout = p["in_dtype"], p["out_dtype"]
    ve = 16 // BYTES[din]  # elements per 16-byte chunk
    cpt = ACC_PER_THREAD // ve  # chunks per thread and segment
    x_numel, w_numel, out_numel, xsf_numel = T.dynamic("x_numel, w_numel, out_numel, xsf_numel")

    @T.prim_func
    def reduce_fused(
        x: T.Tensor((x_numel,), din),  # [N, H] contiguous
        topk_weights: T.Tensor((w_numel,), "float32"),  # [T, K] contiguous (unused without weights)
        token_topk_to_pos: T.Tensor((w_numel,), "int32"),  # [T, K] contiguous
        out: T.Tensor((out_numel,), dout),  # [T, H] contiguous
        sf: T.Tensor((1,), "float32"),
        x_sf: T.Tensor((xsf_numel,), "float32"),  # [N]
        num_tokens: T.int32,
        num_topk: T.int32,
        num_expanded: T.int32,
        hidden_chunks: T.int32,  # H / (16 / sizeof(in_dtype)); H is a multiple of 256
        has_weights: T.int32,
        has_x_sf: T.int32,
        has_sf: T.int32,
    ):
        with T.Kernel(num_tokens, threads=THREADS) as bx:
            tx = T.get_thread_binding()
            acc = T.alloc_local((cpt, ve), "float32")
            xr = T.alloc_local((cpt, ve), din)
            ov = T.alloc_local((ve,), dout)
            s = T.alloc_var("float32")
            out_scale = T.alloc_var("float32")
            row = T.Cast("int64", bx)
            T.pdl_sync()
            out_scale = T.float32(1)
            if has_sf != 0:
                out_scale = sf[0]
            for g in T.serial(T.ceildiv(hidden_chunks, THREADS * cpt)):
                for j in T.unroll(cpt):
                    for i in T.unroll(ve):
                        acc[j, i] = T.float32(0)
                for k in T.serial(num_topk):
                    pos = token_topk_to_pos[row * num_topk + k]
                    if pos >= 0 and pos < num_expanded:
                        s = T.float32(1)
                        if has_weights != 0:
                            s = topk_weights[row * num_topk + k]
                        if has_x_sf != 0:
                            s = s * x_sf[pos]
                        for j in T.unroll(cpt):
                            c = (g * cpt + j) * THREADS + tx
                            if c < hidden_chunks:  # index = chunk * ve + i, so the load is provably 16-byte
                                for i in T.vectorized(ve):
                                    xr[j, i] = x[(T.Cast("int64", pos) * hidden_chunks + c) * ve + i]
                        for j in T.unroll(cpt):
                            for i in T.unroll(ve):
                                acc[j, i] = T.call_extern("float32", "__fmaf_rn", T.Cast("float32", xr[j, i]), s,
                                                          acc[j, i])
                for j in T.unroll(cpt):
                    c = (g * cpt + j) * THREADS + tx
                    if c < hidden_chunks:
                        for i in T.unroll(ve):
                            ov[i] = T.Cast(dout, acc[j, i] * out_scale)
                        for i in T.vectorized(ve):
                            out[(row * hidden_chunks + c) * ve + i] = ov[i]
            T.pdl_trigger()

    return reduce_fused
