"""The transform family's public functions and their torch.library ops (one declaration each)."""
from typing import Optional

import torch

from kernelkiln._ops.library import library_op
from kernelkiln.transform import _rotary


@library_op("apply_rotary", mutates_args=("query", "key"))
def _apply_rotary_op(query: torch.Tensor, cos_sin_cache: torch.Tensor, key: Optional[torch.Tensor],
                     positions: Optional[torch.Tensor], interleaved: bool, conjugate: bool, seqlen_offset: int) -> None:
    _rotary.apply_rotary(query, cos_sin_cache, key, positions, interleaved, conjugate, seqlen_offset)


@_apply_rotary_op.register_fake
def _apply_rotary_fake(query, cos_sin_cache, key, positions, interleaved, conjugate, seqlen_offset):
    _rotary.check(query, cos_sin_cache, key, positions, interleaved, conjugate, seqlen_offset, device=False)
    return None


def apply_rotary(query, cos_sin_cache, key=None, positions=None, interleaved=False, conjugate=False, seqlen_offset=0):
    """Rotary position embedding in place on ``query`` (and ``key``); returns None.

    Same signature and semantics as tile_kernels 2.1 ``transform.apply_rotary``: NeoX pairs (i, i + D/2) or
    interleaved ones (2i, 2i + 1), the conjugate rotation with ``conjugate=True``, token rows of the cache from
    ``positions`` (or the token index) plus ``seqlen_offset``. Under ``torch.compile`` the call goes through the
    registered op ``kernelkiln::apply_rotary``.
    """
    if torch.compiler.is_compiling():
        return _apply_rotary_op(query, cos_sin_cache, key, positions, interleaved, conjugate, seqlen_offset)
    return _rotary.apply_rotary(query, cos_sin_cache, key, positions, interleaved, conjugate, seqlen_offset)
