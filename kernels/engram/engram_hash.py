"""engram_hash: embedding-table rows of every token's n-grams for every Engram layer (spec: the contract's doc).

One thread per token (grid x = token blocks, y = layers). Thread level: each thread runs its own unrolled chain of
64-bit xor-multiply steps and floor modulos, which no tile operation expresses; the row buffer of (n-1)·M int32
values is written with vector stores (the row start is a multiple of (n-1)·M elements).
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.engram import HASH_THREADS as THREADS

# Declared in kernelkiln_contract.engram (ENGRAM_HASH): max_ngram_size, num_embed_table_per_ngram and
# has_image_token_mask, and the launch-argument names below, which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    del arch
    n, m, has_mask = p["max_ngram_size"], p["num_embed_table_per_ngram"], bool(p["has_image_token_mask"])
    cols = (n - 1) * m
    ids_numel, l_n, l_cols, out_numel, mask_numel = T.dynamic("ids_numel, l_n, l_cols, out_numel, mask_numel")

    @T.prim_func
    def engram_hash(
        ngram_token_ids: T.Tensor((ids_numel,), "int32"),  # [T, n]
        multipliers: T.Tensor((l_n,), "int64"),  # [L, n]
        vocab_sizes: T.Tensor((l_cols,), "int32"),  # [L, n-1, M]
        offsets: T.Tensor((l_cols,), "int32"),  # [L, (n-1)·M]
        image_token_mask: T.Tensor((mask_numel,), "bool"),  # [T]; unused without a mask
        output: T.Tensor((out_numel,), "int32"),  # [L, T, (n-1)·M]
        num_tokens: T.int32,
        num_ngram_layers: T.int32,
    ):
        with T.Kernel(T.ceildiv(num_tokens, THREADS), num_ngram_layers, threads=THREADS) as (bx, layer):
            tx = T.get_thread_binding()
            row = T.alloc_local((cols,), "int32")
            h = T.alloc_var("int64")
            T.pdl_sync()
            t = bx * THREADS + tx
            if t < num_tokens:
                base = (T.Cast("int64", layer) * num_tokens + t) * cols
                masked = T.alloc_var("bool")
                masked = False
                if has_mask:
                    masked = image_token_mask[t]
                if masked:
                    for c in T.vectorized(cols):
                        output[base + c] = -1
                else:
                    h = T.int64(0)
                    for i in T.unroll(n):
                        h = T.bitwise_xor(h, T.Cast("int64", ngram_token_ids[T.Cast("int64", t) * n + i])
                                          * multipliers[layer * n + i])
                        if i > 0:
                            for j in T.unroll(m):
                                c = (i - 1) * m + j
                                size = T.Cast("int64", vocab_sizes[layer * cols + c])
                                row[c] = T.Cast("int32", T.floormod(h, size) + T.Cast("int64", offsets[layer * cols + c]))
                    for c in T.vectorized(cols):
                        output[base + c] = row[c]
            T.pdl_trigger()

    return engram_hash
