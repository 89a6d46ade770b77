"""Contracts of the Engram n-gram hash and the gate weight's product and its gradient reduction.

The specification of each op is its contract's ``doc``; docs/spec/engram.md is generated from it.
"""
from kernelkiln_contract._core import OpContract, Param

HASH_NGRAM_SIZES = (2, 3, 4, 5)
HASH_TABLES_PER_NGRAM = (1, 2, 4, 8, 16)
HASH_THREADS = 128
ENGRAM_HIDDEN_ALIGN = 256  # hidden sizes the weight kernels take are multiples of it
GRAD_W_REDUCE_ROWS = 33  # partial rows each thread has in flight in grad_w_reduce


ENGRAM_HASH = OpContract(
    op="engram_hash",
    kernel="kernels.engram.engram_hash",
    params=(
        Param("max_ngram_size", HASH_NGRAM_SIZES),
        Param("num_embed_table_per_ngram", HASH_TABLES_PER_NGRAM),
        Param("has_image_token_mask", (False, True)),
    ),
    args=("ngram_token_ids", "multipliers", "vocab_sizes", "offsets", "image_token_mask", "output",
          "num_tokens", "num_ngram_layers"),
    representative={"max_ngram_size": 3, "num_embed_table_per_ngram": 8, "has_image_token_mask": True},
    doc="""\
Embedding-table rows of every n-gram of every token, for every Engram layer: ``out[l, t, (i-1)·M + j]`` for the
n-gram of the first i+1 ids of token t (i = 1 .. n-1) and hash table j (M tables per n-gram order).

Inputs: ids ``[T, n]`` int32, multipliers ``[L, n]`` int64, vocab sizes ``[L, n-1, M]`` int32 (each > 0), offsets
``[L, (n-1)·M]`` int32 (``make_offsets`` gives the exclusive prefix sums of the sizes), optional image-token mask
``[T]`` bool. Output: a new ``[L, T, (n-1)·M]`` int32 tensor.

Per (layer l, token t): ``h = 0``; for i = 0 .. n-1, ``h ^= int64(id[t, i]) · mult[l, i]`` (two's-complement
64-bit products, wrapping); after each i ≥ 1 the row of table j is ``floormod(h, vocab[l, i-1, j]) + offsets[l, (i-1)·M
+ j]`` truncated to int32. The floor modulo is Python's and torch's ``%``: a negative h still gives a row in
[0, vocab). Image tokens (mask True) get -1 in every column. Integer arithmetic: bit-exact by construction.

Compile time: n and M (the unrolled loops and the per-thread row buffer) and whether a mask is given. Runtime: the
token count and the layer count (a grid dimension). One thread per token; no launch for T = 0.""",
)

FUSED_WEIGHT = OpContract(
    op="fused_weight",
    kernel="kernels.engram.fused_weight",
    params=(Param("weight_dtype", ("bfloat16",)),),
    args=("weight_hidden", "weight_embed", "out", "numel"),
    representative={"weight_dtype": "bfloat16"},
    doc="""\
The gate's fused weight ``float(weight_hidden) · float(weight_embed)``: two ``[hc, H]`` bf16 tensors give a new
``[hc, H]`` fp32 one, H a multiple of 256. The product of two 8-bit significands fits fp32's 24 bits, so it is exact
(bit-identical to ``wh.float() * we.float()``, special values included). Runtime: the element count.""",
)

GRAD_W_REDUCE = OpContract(
    op="grad_w_reduce",
    kernel="kernels.engram.grad_w_reduce",
    params=(Param("weight_dtype", ("bfloat16",)),),
    args=("grad_w_partial", "weight_hidden", "weight_embed", "grad_weight_hidden", "grad_weight_embed",
          "num_partials", "numel_vecs"),
    representative={"weight_dtype": "bfloat16"},
    doc="""\
The backward of ``fused_weight`` (product rule), accumulated in place: the gate backward's per-CTA partials
``grad_w_partial [P, hc, H]`` fp32 are summed, ``S = (((0 + p_0) + p_1) + ... + p_{P-1})`` strictly in row order,
then ``grad_weight_hidden = fma(S, float(weight_embed), grad_weight_hidden)`` and ``grad_weight_embed = fma(S,
float(weight_hidden), grad_weight_embed)`` (one rounding each; fp32 ``[hc, H]`` accumulators, bf16 weights).

The row order makes the result independent of the tiling, so a CPU reference that adds the rows in turn is
bit-exact. P and H (a multiple of 256) are runtime arguments; the partial count is the gate backward's (the SM
count it ran with). A thread owns 4 columns and reads 16 rows at a time with independent vector loads before
adding them in order.""",
)

CONTRACTS = (ENGRAM_HASH, FUSED_WEIGHT, GRAD_W_REDUCE)
