"""Block-wide xor-butterfly all-reduce of per-thread fp32 sums, in the order the peer's ``T.reduce_sum`` uses on
sm_90a: offsets threads/2 .. 32 through shared memory (one barrier per step), then 16 .. 1 by ``shfl_xor``, so every
thread ends with the same totals and the bits are decided by the offsets, not by the thread count of the caller's
other phases."""


def block_allreduce(T, threads, count, fadd):
    """A macro ``allreduce(acc, red, tx)``: the ``count`` sums in ``acc`` (local) of every thread become the block's
    totals; ``red`` is a shared scratch of ``count * threads`` fp32, ``fadd`` the (uncontracted) addition."""
    smem_steps = (threads // 32).bit_length() - 1  # the offsets >= 32

    @T.macro
    def allreduce(acc, red, tx):
        for st in T.unroll(smem_steps):
            if st > 0:
                T.sync_threads()  # the previous step's reads of red are done
            for s in T.unroll(count):
                red[s * threads + tx] = acc[s]
            T.sync_threads()
            for s in T.unroll(count):
                acc[s] = fadd(acc[s], red[s * threads + (tx ^ T.shift_right(threads // 2, st))])
        for s in T.unroll(count):
            for o in T.unroll(5):  # offsets 16 .. 1 within the warp
                acc[s] = fadd(acc[s], T.shfl_xor(acc[s], T.shift_right(16, o)))

    return allreduce
