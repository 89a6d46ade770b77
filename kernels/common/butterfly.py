"""Block-wide xor-butterfly all-reduce of per-thread fp32 sums, in the order the peer's ``T.reduce_sum`` uses on
sm_90a: offsets threads/2 .. 32 through shared memory (one barrier per step), then 16 .. 1 by ``shfl_xor``, so every
thread ends with the same totals and the bits are decided by the offsets, not by the thread count of the caller's
other phases."""


def block_allreduce(T, threads, count, fadd, lowest=1):
    """A macro ``allreduce(acc, red, tx)``: the ``count`` sums in ``acc`` (local) of every thread become the block's
    totals; ``red`` is a shared scratch of ``count * threads`` fp32, ``fadd`` the (uncontracted) addition. With
    ``lowest`` > 1 (a power of two) the offsets stop there: each thread ends with the total of the threads that share
    its index modulo ``lowest`` (tl::AllReduce with that scale)."""
    assert lowest >= 1 and lowest & (lowest - 1) == 0 and lowest < 32
    smem_steps = (threads // 32).bit_length() - 1  # the offsets >= 32
    warp_steps = 5 - (lowest.bit_length() - 1)  # offsets 16 .. lowest

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
            for o in T.unroll(warp_steps):  # offsets 16 .. lowest within the warp
                acc[s] = fadd(acc[s], T.shfl_xor(acc[s], T.shift_right(16, o)))

    return allreduce
