"""grad_w_reduce: the gate weights' gradients from the backward's partials, accumulated in place (spec: the
contract's doc).

A CTA owns THREADS·VEC columns of the flattened [hc, H] tensors, a thread VEC contiguous ones. The P partial rows are
read ROWS at a time with independent 16-byte loads (all in flight together: that is what keeps the memory busy)
and then added in row order, so the sum is the strictly sequential one. Thread level because P is a runtime
value: TileLang's pipeliner (T.Pipelined) needs a constant trip count (a runtime one fails in its CUDA codegen),
and guarding a constant-count pipelined loop turns its copies into scalar, guarded loads.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.engram import GRAD_W_REDUCE_ROWS as ROWS

# Declared in kernelkiln_contract.engram (GRAD_W_REDUCE): weight_dtype, and the launch-argument names below, which
# the build checks against this PrimFunc.
VEC = 4
THREADS = 64


def build(p, arch):
    import tilelang.language as T

    del arch
    dt = p["weight_dtype"]
    part_numel, numel_t = T.dynamic("part_numel, numel_t")

    def fma(a, b, c):
        return T.call_extern("float32", "__fmaf_rn", a, b, c)

    @T.prim_func
    def grad_w_reduce(
        grad_w_partial: T.Tensor((part_numel,), "float32"),  # [P, hc, H]
        weight_hidden: T.Tensor((numel_t,), dt),
        weight_embed: T.Tensor((numel_t,), dt),
        grad_weight_hidden: T.Tensor((numel_t,), "float32"),  # accumulated in place
        grad_weight_embed: T.Tensor((numel_t,), "float32"),
        num_partials: T.int32,
        numel_vecs: T.int32,  # hc·H / VEC (so the row starts are provably aligned for the vector loads)
    ):
        with T.Kernel(T.ceildiv(numel_vecs, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            rows = T.alloc_local((ROWS, VEC), "float32")
            s = T.alloc_local((VEC,), "float32")
            wh = T.alloc_local((VEC,), dt)
            we = T.alloc_local((VEC,), dt)
            gh = T.alloc_local((VEC,), "float32")
            ge = T.alloc_local((VEC,), "float32")
            cv = T.Cast("int64", bx * THREADS + tx)  # the thread's column group
            col = cv * VEC
            T.pdl_sync()
            # the update's other operands first: their loads fly with the first rows, not after the sum
            for j in T.vectorized(VEC):
                wh[j] = weight_hidden[col + j]
            for j in T.vectorized(VEC):
                we[j] = weight_embed[col + j]
            for j in T.vectorized(VEC):
                gh[j] = grad_weight_hidden[col + j]
            for j in T.vectorized(VEC):
                ge[j] = grad_weight_embed[col + j]
            for j in T.unroll(VEC):
                s[j] = T.float32(0)
            for k in T.serial(T.truncdiv(num_partials, ROWS)):
                for r in T.unroll(ROWS):
                    for j in T.vectorized(VEC):
                        rows[r, j] = grad_w_partial[(T.Cast("int64", k * ROWS + r) * numel_vecs + cv) * VEC + j]
                for r in T.unroll(ROWS):
                    for j in T.unroll(VEC):
                        s[j] = s[j] + rows[r, j]
            for r in T.serial(num_partials - T.truncdiv(num_partials, ROWS) * ROWS):
                for j in T.vectorized(VEC):
                    rows[0, j] = grad_w_partial[(T.Cast("int64", T.truncdiv(num_partials, ROWS) * ROWS + r)
                                                 * numel_vecs + cv) * VEC + j]
                for j in T.unroll(VEC):
                    s[j] = s[j] + rows[0, j]
            for j in T.unroll(VEC):
                gh[j] = fma(s[j], T.Cast("float32", we[j]), gh[j])
            for j in T.vectorized(VEC):
                grad_weight_hidden[col + j] = gh[j]
            for j in T.unroll(VEC):
                ge[j] = fma(s[j], T.Cast("float32", wh[j]), ge[j])
            for j in T.vectorized(VEC):
                grad_weight_embed[col + j] = ge[j]
            T.pdl_trigger()

    return grad_w_reduce
