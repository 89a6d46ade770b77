"""engram_hash (tile_kernels 2.1 ``engram.engram_hash``): embedding-table rows of every token's n-grams.

Spec: kernelkiln_contract.engram.ENGRAM_HASH (docs/spec/engram.md). Vocab sizes are not checked for being positive
on the host (that would read device memory); a zero size divides by zero on the device, as in the peer.
"""
from typing import Optional

import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln_contract.engram import ENGRAM_HASH as CONTRACT
from kernelkiln_contract.engram import HASH_NGRAM_SIZES, HASH_TABLES_PER_NGRAM

__all__ = ["engram_hash"]


def _check(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask, device=True):
    """(T, n, L, M); raises naming the argument."""
    checks.tensor("ngram_token_ids", ngram_token_ids, (torch.int32,), ndim=2)
    checks.tensor("multipliers", multipliers, (torch.int64,), ndim=2)
    checks.tensor("vocab_sizes", vocab_sizes, (torch.int32,), ndim=3)
    checks.tensor("offsets", offsets, (torch.int32,), ndim=2)
    t, n = ngram_token_ids.shape
    if n not in HASH_NGRAM_SIZES:
        raise ValueError(f"ngram_token_ids.shape[1] (max_ngram_size) must be one of {list(HASH_NGRAM_SIZES)}, got {n}")
    layers = multipliers.shape[0]
    if tuple(multipliers.shape) != (layers, n):
        raise ValueError(f"multipliers must have shape [num_ngram_layers, max_ngram_size] = [L, {n}], got "
                         f"{tuple(multipliers.shape)}")
    m = vocab_sizes.shape[2]
    if tuple(vocab_sizes.shape[:2]) != (layers, n - 1):
        raise ValueError(f"vocab_sizes must have shape [num_ngram_layers, max_ngram_size - 1, M] = [{layers}, {n - 1}, "
                         f"M], got {tuple(vocab_sizes.shape)}")
    if m not in HASH_TABLES_PER_NGRAM:
        raise ValueError(f"vocab_sizes.shape[2] (num_embed_table_per_ngram) must be one of "
                         f"{list(HASH_TABLES_PER_NGRAM)}, got {m}")
    if tuple(offsets.shape) != (layers, (n - 1) * m):
        raise ValueError(f"offsets must have shape [num_ngram_layers, (max_ngram_size - 1) * M] = "
                         f"[{layers}, {(n - 1) * m}], got {tuple(offsets.shape)}")
    if layers < 1:
        raise ValueError("multipliers must have at least one layer (shape[0] >= 1)")
    if image_token_mask is not None:
        checks.tensor("image_token_mask", image_token_mask, (torch.bool,), ndim=1)
        if image_token_mask.shape[0] != t:
            raise ValueError(f"image_token_mask must have shape [num_tokens] = [{t}], got "
                             f"{tuple(image_token_mask.shape)}")
    named = [("ngram_token_ids", ngram_token_ids), ("multipliers", multipliers), ("vocab_sizes", vocab_sizes),
             ("offsets", offsets)] + ([("image_token_mask", image_token_mask)] if image_token_mask is not None else [])
    for name, x in named:
        checks.contiguous(name, x)
        checks.same_device(name, x, "ngram_token_ids", ngram_token_ids)
    if device:
        checks.cuda("ngram_token_ids", ngram_token_ids)
    return t, n, layers, m


def _hash(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask=None):
    t, n, layers, m = _check(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask)
    out = torch.empty((layers, t, (n - 1) * m), dtype=torch.int32, device=ngram_token_ids.device)
    if t:
        values = CONTRACT.key(max_ngram_size=n, num_embed_table_per_ngram=m,
                              has_image_token_mask=image_token_mask is not None)
        launch(CONTRACT, values, ngram_token_ids.device, ngram_token_ids=ngram_token_ids.data_ptr(),
               multipliers=multipliers.data_ptr(), vocab_sizes=vocab_sizes.data_ptr(), offsets=offsets.data_ptr(),
               image_token_mask=image_token_mask.data_ptr() if image_token_mask is not None else 0,
               output=out.data_ptr(), num_tokens=t, num_ngram_layers=layers)
    return out


@library_op("engram_hash")
def _engram_hash_op(ngram_token_ids: torch.Tensor, multipliers: torch.Tensor, vocab_sizes: torch.Tensor,
                    offsets: torch.Tensor, image_token_mask: Optional[torch.Tensor]) -> torch.Tensor:
    return _hash(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask)


@_engram_hash_op.register_fake
def _engram_hash_fake(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask):
    t, n, layers, m = _check(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask, device=False)
    return ngram_token_ids.new_empty((layers, t, (n - 1) * m))


def engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask=None):
    """Embedding-table rows ``[L, T, (n-1)·M]`` int32 of every token's n-grams for each Engram layer.

    Same signature and results as tile_kernels 2.1 ``engram.engram_hash``: ids ``[T, n]`` int32, multipliers
    ``[L, n]`` int64, vocab sizes ``[L, n-1, M]`` int32, offsets ``[L, (n-1)·M]`` int32 (``make_offsets``), an
    optional ``[T]`` bool mask whose True tokens (image tokens) get -1 in every column.
    """
    if torch.compiler.is_compiling():
        return _engram_hash_op(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask)
    return _hash(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask)
