"""mhc_sinkhorn_bwd: the gradient of mhc_sinkhorn_fwd with respect to its logits (spec:
kernelkiln_contract.mhc_sinkhorn).

Same lane layout as the forward (one element per lane, a token's m² lanes one shuffle group, sums as the
forward's xor butterflies, the peer's order). The backward needs the input of every normalization: the states
S_0 = softmax, S_1 = S_0 + eps, then alternately the inputs of the column and row divisions, 2·repeat states in
all. ``repeat`` is a runtime value, so the states go to a shared-memory ring of SLOTS states per lane (each lane
reads back only what it wrote: no barrier); when 2·repeat exceeds it the states are handled in segments of SLOTS
from the end, each recomputing the forward from the logits up to its first state (the recomputed states are
bit-identical, so the result does not depend on SLOTS). The sums of a state are recomputed from it rather than
stored (the gradient's own sums need the same shuffles).
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernels.mhc.mhc_sinkhorn_fwd import LaneGroup
from kernelkiln_contract.mhc_sinkhorn import SINKHORN_BWD_SLOTS as SLOTS
from kernelkiln_contract.mhc_sinkhorn import SINKHORN_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_sinkhorn (MHC_SINKHORN_BWD): mhc_mult and the launch-argument names below.


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    mm = m * m
    tokens_per_block = THREADS // mm
    n_t = T.dynamic("n_t")

    @T.prim_func
    def mhc_sinkhorn_bwd(
        grad_output: T.Tensor((n_t,), "float32"),  # [n, m, m]
        x: T.Tensor((n_t,), "float32"),  # [n, m, m]: the forward's input logits
        grad_input: T.Tensor((n_t,), "float32"),  # [n, m, m]; may be grad_output itself
        num_tokens: T.int32,
        repeat: T.int32,  # >= 1
        eps: T.float32,
    ):
        with T.Kernel(T.ceildiv(num_tokens, tokens_per_block), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            grp = LaneGroup(T, m, tx % mm)
            states = T.alloc_shared((SLOTS * THREADS,), "float32")
            xv = T.alloc_var("float32")
            gv = T.alloc_var("float32")
            v = T.alloc_var("float32")
            u = T.alloc_var("float32")
            s = T.alloc_var("float32")
            t = T.alloc_var("float32")
            e = T.alloc_var("float32")
            idx = T.Cast("int64", bx) * THREADS + tx
            valid = bx * tokens_per_block + tx // mm < num_tokens
            T.pdl_sync()
            xv = T.float32(0)
            gv = T.float32(0)
            if valid:
                xv = x[idx]
                gv = grad_output[idx]
            n_states = repeat * 2
            for seg in T.serial(T.ceildiv(n_states, SLOTS)):
                hi = n_states - seg * SLOTS  # this segment holds the states [lo, hi)
                lo = T.max(hi - SLOTS, 0)
                # forward from the logits: S_0, then S_{h+1} from S_h, keeping S_lo .. S_{hi-1}
                e = grp.exp_shifted(xv)
                v = T.ieee_fdiv(e, grp.row_sum(e))
                for h in T.serial(hi - 1):
                    if h >= lo:
                        states[(h - lo) * THREADS + tx] = v
                    if h == 0:
                        v = T.ieee_add(v, eps)
                    elif h % 2 == 1:
                        v = grp.div_eps(v, grp.col_sum(v), eps)
                    else:
                        v = grp.div_eps(v, grp.row_sum(v), eps)
                states[(hi - 1 - lo) * THREADS + tx] = v
                # y = u / (s + eps) along the step's axis: gu = (g - Σ g·u / (s + eps)) / (s + eps)
                for q in T.serial(hi - T.max(lo, 1)):
                    h = hi - 1 - q
                    u = states[(h - lo) * THREADS + tx]
                    t = T.call_extern("float32", "__fmul_rn", gv, u)
                    if h % 2 == 1:
                        s = T.ieee_add(grp.col_sum(u), eps)
                        t = T.ieee_fdiv(grp.col_sum(t), s)
                    else:
                        s = T.ieee_add(grp.row_sum(u), eps)
                        t = T.ieee_fdiv(grp.row_sum(t), s)
                    gv = T.ieee_fdiv(gv - t, s)
                # S_1 = S_0 + eps passes the gradient through; the softmax: (g - Σ_row g·p) · p
                if lo == 0:
                    u = states[tx]
                    t = grp.row_sum(T.call_extern("float32", "__fmul_rn", gv, u))
                    gv = T.call_extern("float32", "__fmul_rn", gv - t, u)
            if valid:
                grad_input[idx] = gv
            T.pdl_trigger()

    return mhc_sinkhorn_bwd
