"""batched_transpose_weight_sf: fp32 power-of-two weight block scales -> two packed UE8M0 layouts.

For every weight w (fp32 scales [G, nb, kb], block bs, n = nb*bs, k = kb*bs), two int32 outputs
(OPERATORS.md §3.2, mirrored by tilekiln.torch.quant_lossless.batched_transpose_weight_sf):
  sf0 word (g, r, q) at g*n*K4 + q*n + r = UE8M0 bytes of blocks (r // bs, 4q .. 4q+3)
  sf1 word (g, c, q) at g*k*N4 + q*k + c = UE8M0 bytes of blocks (4q .. 4q+3, c // bs)
(K4 = ceil(kb/4), N4 = ceil(nb/4); bytes past kb / nb are 0). Both are "MN-major": the words
of one column q are contiguous along r (c), and (g, q) folds into one column index col, so the
word sits at col * n + r. A task is 16 consecutive rows of one column: 4 scale loads (L1/L2
hits, the input is tiny), one packed word, four 16-byte stores of it (bs >= 32, so the 16 rows
share a block).

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

OP = "transpose_weight_sf"
PARAM_NAMES = ("sf_dtype",)
PASS_CONFIGS = THREAD_LEVEL

THREADS = 256
ROWS_PER_TASK = 16
FIELDS = 8
SEARCH_STEPS = 16  # binary search depth: up to 65536 weights
ERR_WEIGHT_SF = 3


def invalid_reason(p):
    if p["sf_dtype"] != "float32":
        return "sf_dtype must be float32"
    return None


def build(p, arch):
    import tilelang.language as T

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
            tx = T.get_thread_binding()
            task = bx * THREADS + tx
            lo = T.alloc_var("int32")
            hi = T.alloc_var("int32")
            word = T.alloc_var("uint32")
            bits = T.alloc_local((4,), "uint32")
            vals = T.alloc_local((4,), "uint32")
            iv = T.alloc_local((12,), "int32")
            sv = T.alloc_local((3,), i64)

            T.pdl_sync()
            if task < num_tasks:
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
                    if T.bitwise_and(bits[i], T.uint32(0x807FFFFF)) != T.uint32(0):
                        err[1] = lo
                        err[2] = T.Cast("int32", sv[0] + (iv[10] + i) * sv[1])
                        err[0] = ERR_WEIGHT_SF
                    word = T.bitwise_or(word, T.shift_left(T.bitwise_and(T.shift_right(bits[i], T.uint32(23)),
                                                                         T.uint32(0xFF)), T.uint32(8 * i)))
                for i in T.unroll(4):
                    vals[i] = word
                # in 16-byte units, so the vector stores are provably aligned
                sv[2] = (table[base + 3 + iv[0]] + T.Cast(i64, iv[7]) * T.shift_right(iv[2], 2) +
                         iv[8] * (ROWS_PER_TASK // 4))
                for v in T.unroll(ROWS_PER_TASK // 4):
                    for i in T.vectorized(4):
                        out[(sv[2] + v) * 4 + i] = vals[i]
            T.pdl_trigger()

    return transpose_weight_sf
