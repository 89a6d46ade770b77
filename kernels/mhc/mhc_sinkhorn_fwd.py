"""mhc_sinkhorn_fwd: Sinkhorn normalization of m×m fp32 matrices (spec: kernelkiln_contract.mhc_sinkhorn).

Thread level, because the row and column sums must come out in one stated order for the fused pre-block to be
bit-identical to this op: a lane owns one element (j, k) of a token's matrix (lane e = j·m + k), the m² lanes of a
token form one group inside a warp, and every sum is the xor butterfly of TileLang's ``tl::AllReduce`` as the
peer's kernel lowers it: each lane starts from ``0 + v``, then adds ``__shfl_xor`` partners at offsets m/2 .. 1
(a row) or m²/2 .. m (a column), largest first; every lane ends with the same sum. Division and addition are
``__fdiv_rn`` / ``__fadd_rn``, so nvcc cannot contract or reorder them. ``repeat`` is a runtime
loop count and eps a runtime scalar. mhc_pre_big_fuse_fwd and mhc_sinkhorn_bwd build their Sinkhorn steps from
the expression builders below, which is what keeps the three kernels' bits equal.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_sinkhorn import SINKHORN_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_sinkhorn (MHC_SINKHORN_FWD): mhc_mult and the launch-argument names below.


class LaneGroup:
    """Expression builders for the lane that owns element (j, k) of an m×m matrix spread over a shuffle group of
    width m² (lane e = j·m + k of the group)."""

    def __init__(self, T, m, e):
        assert m & (m - 1) == 0, "the butterfly sums need a power-of-two m"
        self.T, self.m, self.width = T, m, m * m
        self.j, self.k = e // m, e % m

    def _gather(self, v, lane_of):
        T = self.T
        return [T.shfl_sync(v, lane_of(c), self.width) for c in range(self.m)]

    def _butterfly(self, v, top, bottom):
        """``0 + v``, then ``s + shfl_xor(s, d)`` for d = top, top/2, .., bottom (tl::AllReduce's order)."""
        T = self.T
        s = T.ieee_add(T.float32(0), v)
        d = top
        while d >= bottom:
            s = T.ieee_add(s, T.shfl_xor(s, d))
            d //= 2
        return s

    def row_sum(self, v):
        """Σ_c v[j, c]: butterfly over the k bits of the lane (offsets m/2 .. 1)."""
        return self._butterfly(v, self.m // 2, 1)

    def col_sum(self, v):
        """Σ_c v[c, k]: butterfly over the j bits of the lane (offsets m²/2 .. m)."""
        return self._butterfly(v, self.width // 2, self.m)

    def row_max(self, v):
        vals = self._gather(v, lambda c: self.j * self.m + c)
        mx = vals[0]
        for x in vals[1:]:
            mx = self.T.max(mx, x)
        return mx

    def exp_shifted(self, v):
        """expf(v - max_c v[j, c]): the softmax's numerator (the max is exact whatever its order)."""
        return self.T.exp(v - self.row_max(v))

    def div_eps(self, v, s, eps):
        """v / (s + eps), IEEE."""
        T = self.T
        return T.ieee_fdiv(v, T.ieee_add(s, eps))


def build(p, arch):
    import tilelang.language as T

    del arch
    m = p["mhc_mult"]
    mm = m * m
    tokens_per_block = THREADS // mm
    n_t = T.dynamic("n_t")

    @T.prim_func
    def mhc_sinkhorn_fwd(
        comb_res_mix: T.Tensor((n_t,), "float32"),  # [n, m, m]
        comb_res_mix_out: T.Tensor((n_t,), "float32"),  # [n, m, m]; may be comb_res_mix itself
        num_tokens: T.int32,
        repeat: T.int32,  # >= 1
        eps: T.float32,
    ):
        with T.Kernel(T.ceildiv(num_tokens, tokens_per_block), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            g = LaneGroup(T, m, tx % mm)
            v = T.alloc_var("float32")
            e = T.alloc_var("float32")
            idx = T.Cast("int64", bx) * THREADS + tx
            valid = bx * tokens_per_block + tx // mm < num_tokens
            T.pdl_sync()
            v = T.float32(0)
            if valid:
                v = comb_res_mix[idx]
            # every lane runs the steps (the shuffles need the whole warp); only valid lanes store
            e = g.exp_shifted(v)
            v = T.ieee_add(T.ieee_fdiv(e, g.row_sum(e)), eps)
            v = g.div_eps(v, g.col_sum(v), eps)
            for _ in T.serial(repeat - 1):
                v = g.div_eps(v, g.row_sum(v), eps)
                v = g.div_eps(v, g.col_sum(v), eps)
            if valid:
                comb_res_mix_out[idx] = v
            T.pdl_trigger()

    return mhc_sinkhorn_fwd
