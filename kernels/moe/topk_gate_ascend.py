"""topk_gate on Ascend (dav-3510): the K highest scores per row, ties to the smaller expert index (docs/SPEC.md §3.1),
the same op as kernels/moe/topk_gate.py.

One row at a time per vector core (persistent over rows: core c takes rows c, c + num_cores, ...). The row is copied
into the Unified Buffer and held in ``num_vregs`` 64-lane fp32 registers (lanes past E hold -inf). Each of the K
rounds takes the maximum over the registers and lanes (vmax, then the in-register reduction vcmax), then the smallest
expert index among the lanes equal to it (vmin / vcmin of the indices, int32 max elsewhere), so ties go to the
smaller index exactly as in the reference; -0.0 and +0.0 compare equal, so they tie too. The winner's lane is set to
-inf for the next round. The K indices are gathered into one int32 register as the low words of int64 values (lane
2k, the high lanes 0) and leave with one copy per row.

Non-finite scores do not trap: x - x is 0 exactly for finite x, so a row with an inf or NaN gets -1 in every index
(both words) and the core records (1, row) in ``err`` at the end of the kernel (a host-visible flag the op raises
on, as the CUDA kernel's).

Compile-time: the registers per row, ceil(E / 64) (E up to 512, as for CUDA). Runtime: token count, expert count,
K (1..min(E, 32)), the core count.
"""
PASS_CONFIGS = {}
LANES = 64
STAGES = 2
WORK_ITEMS = "num_tokens"  # one row per work item (docs/ASCEND.md)


def build(p, arch):
    from tilelang.ascend import language as T
    from tilelang.ascend.language import simd as S

    del arch
    nv = p["num_vregs"]
    width = LANES * nv
    int_max = 2147483647
    num_tokens, num_experts, num_topk = T.dynamic("num_tokens, num_experts, num_topk")

    @T.prim_func
    def topk_gate(
        scores: T.Tensor((num_tokens, num_experts), "float32"),
        topk_idx: T.Tensor((num_tokens, num_topk), "int64"),
        err: T.Tensor((2,), "int32"),
        num_cores: T.int32,
    ):
        with T.Kernel(num_cores) as core:
            row_ub = T.alloc_shared((width,), "float32")
            out_ub = T.alloc_shared((LANES,), "int32")
            err_ub = T.alloc_shared((LANES,), "int32")  # lane 0: any bad row on this core, lane 1: the last one
            idx_words = T.view(topk_idx, (num_tokens, num_topk * 2), "int32")
            T.annotate_buffer_versions({row_ub: STAGES, out_ub: STAGES, err_ub: 1})
            with T.SimdVF():
                T.clear(err_ub)
            for token in T.Persistent([num_tokens], num_cores, core, group_size=1, num_stages=STAGES):
                T.copy(scores[token, 0:num_experts], row_ub[0:num_experts])
                with T.SimdVF():
                    lanes = S.vci(0, "int32")
                    neg_inf = S.vdup(-T.infinity("float32"), "float32")
                    zero_f = S.vdup(0.0, "float32")
                    none = S.vdup(int_max, "int32")
                    vals = S.alloc_local((nv,), "float32")
                    bad = T.alloc_var("int32x64", init=S.vdup(0, "int32"))
                    for j in T.unroll(nv, explicit=True):
                        valid = S.vcmps(S.vadds(lanes, j * LANES), num_experts, op="lt")
                        v = S.vsel(S.vld(row_ub[j * LANES]), neg_inf, valid)
                        vals[j] = v
                        diff = S.vsel(S.vsub(v, v), zero_f, valid)  # NaN exactly where a real score is inf or NaN
                        bad = S.vmax(bad, S.vsel(S.vdup(1, "int32"), S.vdup(0, "int32"),
                                                 S.vcmps(diff, 0.0, op="ne")))
                    picked = T.alloc_var("int32x64", init=S.vdup(0, "int32"))
                    best = S.alloc_var("float32")
                    cand = S.alloc_var("int32")
                    for k in T.serial(num_topk):
                        best = vals[0]
                        for j in T.unroll(1, nv, explicit=True):
                            best = S.vmax(best, vals[j])
                        top = S.vdupv(S.vcmax(best))
                        cand = S.vsel(lanes, none, S.vcmp(vals[0], top, op="eq"))
                        for j in T.unroll(1, nv, explicit=True):
                            cand = S.vmin(cand, S.vsel(S.vadds(lanes, j * LANES), none, S.vcmp(vals[j], top, op="eq")))
                        winner = S.vdupv(S.vcmin(cand))
                        picked = S.vsel(winner, picked, S.vcmps(lanes, 2 * k, op="eq"))
                        for j in T.unroll(nv, explicit=True):
                            vals[j] = S.vsel(neg_inf, vals[j], S.vcmp(S.vadds(lanes, j * LANES), winner, op="eq"))
                    row_bad = S.vcmps(S.vdupv(S.vcmax(bad)), 0, op="ne")
                    S.vsts(out_ub[0], S.vsel(S.vdup(-1, "int32"), picked, row_bad))
                    S.mem_bar("VST_VLD")
                    flags = S.vld(err_ub[0])
                    mark = S.vsel(S.vdup(1, "int32"), S.vdup(token, "int32"), S.vcmps(lanes, 0, op="eq"))
                    S.vsts(err_ub[0], S.vsel(mark, flags, row_bad))
                T.copy(out_ub[0:num_topk * 2], idx_words[token, 0:num_topk * 2])
            if err_ub[0] != 0:
                T.copy(err_ub[0:2], err[0:2])

    return topk_gate
