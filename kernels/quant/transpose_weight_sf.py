"""batched_transpose_weight_sf: fp32 power-of-two weight block scales -> two packed UE8M0 layouts.

For every weight w (fp32 scales [G, nb, kb], block bs, n = nb*bs, k = kb*bs), two int32 outputs
(docs/SPEC.md §3.2, mirrored by kernelkiln.torch.quant_lossless.batched_transpose_weight_sf):
  sf0 word (g, r, q) at g*n*K4 + q*n + r = UE8M0 bytes of blocks (r // bs, 4q .. 4q+3)
  sf1 word (g, c, q) at g*k*N4 + q*k + c = UE8M0 bytes of blocks (4q .. 4q+3, c // bs)
(K4 = ceil(kb/4), N4 = ceil(nb/4); bytes past kb / nb are 0). Both are "MN-major": the words
of one column q are contiguous along r (c), and (g, q) folds into one column index col, so the
word sits at col * n + r. A task is 16 consecutive rows of one column: 4 scale loads (L1/L2
hits, the input is tiny) and one packed word for its 64 output bytes (bs >= 32, so the 16 rows
share a block). The tasks of one region (one weight's sf0 or sf1) are contiguous in memory, so a
warp's 32 tasks cover 2 KB: it writes them as four fully coalesced 16-byte stores per lane, lane l
of store v writing chunk l % 4 of task v * 8 + l / 4, whose word and address come by shuffle.
(Each lane storing its own 64 bytes spread every warp store over 16 lines: 45 % of copy
bandwidth on the H200, ncu long-scoreboard and LSU-throttle stalls.)

One launch serves every weight: a pointer table holds, per weight, int64 fields
[first task, first sf1 task, input offset, sf0 offset, sf1 offset, n, k, 0]; offsets count
4-byte units (input) or 16-byte units (outputs, 32-byte aligned) from the lowest input (output)
address, which the kernel gets as its two buffer arguments, so the table needs no pointer casts.
A thread finds its weight by binary search over the first-task column. All sizes are runtime
values; bs enters as log2.

A scale that is not +0.0 or a positive power of two (bits & 0x807FFFFF != 0; the peer
device-asserts) records (3, weight, flat index) in ``err`` (host-mapped memory) for the
Python side to raise; its byte is then the fp32 exponent field (unspecified).
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.quant (TRANSPOSE_WEIGHT_SF): the input scale dtype (float32 only), and the
# launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL

THREADS = 256
ROWS_PER_TASK = 16
FIELDS = 8
SEARCH_STEPS = 16  # binary search depth: up to 65536 weights
ERR_WEIGHT_SF = 3


def build(p, arch):
    import tilelang.language as T

    from kernels.common.cuda_source import STORE_16B_SOURCE, store_16b

    del arch, p
    in_numel, out_numel, table_numel = T.dynamic("in_numel, out_numel, table_numel")
    i64 = "int64"

    @T.prim_func
    def transpose_weight_sf(
        inp: T.Tensor((in_numel,), "uint32"),  # fp32 scales read as bits, from the lowest input address
        out: T.Tensor((out_numel,), "uint32"),  # int32 words, from the lowest output address
        table: T.Tensor((table_numel,), i64),  # [num_weights, FIELDS]
        err: T.Tensor((4,), "int32"),
        num_weights: T.int32,
        num_tasks: T.int32,
        lg_bs: T.int32,
    ):
        with T.Kernel(T.ceildiv(num_tasks, THREADS), threads=THREADS) as bx:
            T.import_source(STORE_16B_SOURCE)
            tx = T.get_thread_binding()
            lane = tx % 32
            valid = bx * THREADS + tx < num_tasks
            # Lanes past the end work on the last task (every lane must reach the shuffles) and store nothing.
            task = T.min(bx * THREADS + tx, num_tasks - 1)
            lo = T.alloc_var("int32")
            hi = T.alloc_var("int32")
            word = T.alloc_var("uint32")
            bits = T.alloc_local((4,), "uint32")
            vals = T.alloc_local((4,), "uint32")
            iv = T.alloc_local((12,), "int32")
            sv = T.alloc_local((3,), i64)

            T.pdl_sync()
            lo = 0
            hi = num_weights
            for _ in T.serial(SEARCH_STEPS):
                if hi - lo > 1:
                    mid = (lo + hi) // 2
                    if table[T.Cast(i64, mid) * FIELDS] <= T.Cast(i64, task):
                        lo = mid
                    else:
                        hi = mid
            # Materialized once each (inlined expressions would be duplicated into every use).
            base = T.Cast(i64, lo) * FIELDS
            iv[0] = T.Cast("int32", task >= T.Cast("int32", table[base + 1]))  # 1: an sf1 task
            iv[1] = task - T.Cast("int32", table[base + iv[0]])  # task within the region
            # sf0: rows along n, packs along kb; sf1: rows along k, packs along nb.
            iv[2] = T.Cast("int32", table[base + 5 + iv[0]])  # rows (n or k)
            iv[3] = T.shift_right(T.Cast("int32", table[base + 6]), lg_bs)  # kb
            iv[4] = T.shift_right(T.Cast("int32", table[base + 5]), lg_bs)  # nb
            iv[5] = T.if_then_else(iv[0] == 1, iv[4], iv[3])  # packed count limit
            iv[6] = T.shift_right(iv[5] + 3, 2)  # words per row (K4 or N4)
            iv[7] = iv[1] // T.shift_right(iv[2], 4)  # col = g * words + q
            iv[8] = iv[1] - iv[7] * T.shift_right(iv[2], 4)  # r16
            iv[9] = iv[7] // iv[6]  # g
            iv[10] = (iv[7] - iv[9] * iv[6]) * 4  # first packed block 4q
            iv[11] = T.shift_right(iv[8] * ROWS_PER_TASK, lg_bs)  # block of the rows
            # element (g, i, j) of [G, nb, kb]: sf0 reads (g, rblk, 4q+i), sf1 reads (g, 4q+i, rblk)
            sv[0] = (T.Cast(i64, iv[9]) * iv[4] * iv[3] +
                     T.Cast(i64, iv[11]) * T.if_then_else(iv[0] == 1, 1, iv[3]))
            sv[1] = T.Cast(i64, T.if_then_else(iv[0] == 1, iv[3], 1))  # stride along the pack
            for i in T.unroll(4):
                bits[i] = T.uint32(0)
                if iv[10] + i < iv[5]:
                    bits[i] = inp[table[base + 2] + sv[0] + (iv[10] + i) * sv[1]]
            word = T.uint32(0)
            for i in T.unroll(4):
                if valid and T.bitwise_and(bits[i], T.uint32(0x807FFFFF)) != T.uint32(0):
                    err[1] = lo
                    err[2] = T.Cast("int32", sv[0] + (iv[10] + i) * sv[1])
                    err[0] = ERR_WEIGHT_SF
                word = T.bitwise_or(word, T.shift_left(T.bitwise_and(T.shift_right(bits[i], T.uint32(23)),
                                                                     T.uint32(0xFF)), T.uint32(8 * i)))
            # first 16-byte unit of this task's output
            sv[2] = (table[base + 3 + iv[0]] + T.Cast(i64, iv[7]) * T.shift_right(iv[2], 2) +
                     iv[8] * (ROWS_PER_TASK // 4))
            for v in T.unroll(ROWS_PER_TASK // 4):
                src = v * 8 + lane // 4  # the task whose chunk lane % 4 this lane writes
                vals[0] = T.shfl_sync(word, src)
                sv[1] = T.shfl_sync(sv[2], src)
                if T.shfl_sync(T.Cast("int32", valid), src) != 0:
                    store_16b(T, out[(sv[1] + lane % 4) * 4], [vals[0]] * 4)
            T.pdl_trigger()

    return transpose_weight_sf
