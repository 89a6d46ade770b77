"""Test-parameter and test-input generators (the peer's ``tile_kernels.testing.generator``): the same names,
arguments, environment variables (``TK_PRECOMPILE``, ``TK_TEST_LEVEL``) and results. The functions that draw random
numbers draw the same ones in the same order (torch's generator, and Python's ``random`` for the exponent of
``generate_rand_float``), so a seeded test sees the same inputs under either package.

Tensors go to ``kernelkiln.config.get_device()`` ('cuda', or 'npu' on Ascend), as the peer's do; the device is looked
up at call time, so a test may point it at the CPU.
"""
import itertools
import os
import random

import torch

from kernelkiln import config
from kernelkiln.utils import align as _align

_TEST_LEVELS = (0, 1, 2)  # 0: core, 1: default, 2: full


def is_precompile() -> bool:
    """Whether this run only precompiles kernels (``TK_PRECOMPILE=1``): the generators then give one small case."""
    return os.environ.get("TK_PRECOMPILE", "0") == "1"


def get_test_level() -> int:
    """The test level of ``TK_TEST_LEVEL``: 0 (core), 1 (default, when unset) or 2 (full)."""
    level = int(os.environ.get("TK_TEST_LEVEL", "1"))
    if level not in _TEST_LEVELS:
        raise ValueError(f"TK_TEST_LEVEL must be 0, 1 or 2, got {level}")
    return level


def generate_samples(level: int, **dimensions):
    """Parameter dicts over the named dimensions (each an iterable of values), lazily.

    Level 2 gives every combination (the Cartesian product, last dimension fastest). Lower levels walk the
    dimensions side by side, as many samples as the longest one has values, the shorter ones starting over, so each
    value is used at least once.
    """
    names = list(dimensions)
    columns = [list(dimensions[n]) for n in names]
    if level >= 2:
        for values in itertools.product(*columns):
            yield dict(zip(names, values))
        return
    if not columns:
        raise ValueError("generate_samples needs at least one dimension below level 2")
    count = max(map(len, columns))
    if count and not all(columns):
        empty = [n for n, c in zip(names, columns) if not c]
        raise ValueError(f"generate_samples: dimensions {empty} have no values")
    for i in range(count):
        yield {n: c[i % len(c)] for n, c in zip(names, columns)}


def generate_num_tokens(level: int, alignment: int = 1, backward_only: bool = False) -> list[int]:
    """Token counts to test, each rounded up to ``alignment``: 512 and 8001 (8001 alone for a level-0 backward
    test), with 0 and 1 first at level 2; 128 alone when precompiling."""
    if is_precompile():
        return [_align(128, alignment)]
    counts = [8001] if (level == 0 and backward_only) else [512, 8001]
    if level >= 2:
        counts = [0, 1, *counts]
    return [_align(n, alignment) for n in counts]


_HIDDEN_SIZES = (128, 192, 384, 768, 2048, 2560, 3072, 4096, 6144, 7168)


def generate_hidden_sizes(align: int = 64) -> list[int]:
    """The hidden sizes of the test set (128 up to 7168) that are multiples of ``align``."""
    return [h for h in _HIDDEN_SIZES if h % align == 0]


def generate_cast_config(level: int, fmt: str) -> list[tuple[bool, bool, bool]]:
    """Scale-factor layouts to test as ``(use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)``: none for the
    unscaled formats ('fp32', 'bf16'); the packed-UE8M0 layout, and from level 1 also the plain and rounded ones."""
    if fmt in ("fp32", "bf16"):
        return [(False, False, False)]
    layouts = [(True, True, True)]
    if level >= 1:
        layouts = [(False, True, False), (False, False, False), *layouts]
    return layouts


def generate_num_sms(level: int) -> list[int]:
    """SM counts to test: the device's, from level 1 also 19 fewer, from level 2 also a single SM (first)."""
    full = config.get_device_num_sms()
    counts = [full]
    if level >= 1:
        counts.insert(0, full - 19)
    if level >= 2:
        counts.insert(0, 1)
    return counts


_MOE_CORE = ((6, 32, 8), (8, 4, 64))  # level 0: (num_topk, num_experts per rank, num_ep_ranks)


def _moe_case(num_send_tokens, num_topk, num_experts, num_ep_ranks):
    return {"num_send_tokens": num_send_tokens, "num_topk": num_topk, "num_experts": num_experts,
            "num_ep_ranks": num_ep_ranks}


def generate_moe_params(level: int):
    """MoE routing shapes, lazily: dicts of ``num_send_tokens``, ``num_topk``, ``num_experts`` (experts per rank)
    and ``num_ep_ranks``. Level 0: two fixed cases; level 1: 4001 tokens over top-k 2, 6, 8, 9, 72 or 256 experts in
    all and 8 or 64 ranks (where the ranks divide the experts); level 2 adds two corner cases first and more top-k,
    expert and rank counts."""
    if level == 0:
        for num_topk, num_experts, num_ep_ranks in _MOE_CORE:
            yield _moe_case(4001, num_topk, num_experts, num_ep_ranks)
        return
    full = level >= 2
    if full:
        yield _moe_case(0, 1, 1, 1)
        yield _moe_case(1, 8, 256, 8)
    topks = (2, 6, 8, 9) + ((1, 7) if full else ())
    totals = (72, 256) + ((288, 384) if full else ())
    ranks = (8, 64) + ((1, 72, 256) if full else ())
    for num_topk, total, num_ep_ranks in itertools.product(topks, totals, ranks):
        if total % num_ep_ranks == 0:
            yield _moe_case(4001, num_topk, total // num_ep_ranks, num_ep_ranks)


def _draw_topk(params):
    """Top-k expert ids of every token of every rank over all ranks' experts (uniform bf16 scores, unsorted), with
    the local expert count: ids below it are this rank's experts."""
    local = params["num_experts"]
    ranks = params["num_ep_ranks"]
    scores = torch.rand((params["num_send_tokens"] * ranks, local * ranks), dtype=torch.bfloat16,
                        device=config.get_device())
    idx = torch.topk(scores, k=params["num_topk"], dim=-1, sorted=False).indices
    del scores  # may be large: free it before the caller's work
    return idx, local


def generate_topk_idx(params: dict) -> torch.Tensor:
    """Routing ids (int64, ``[tokens, num_topk]``) as one rank of ``params`` (a ``generate_moe_params`` dict) receives
    them: every rank's tokens routed over all ranks' experts, ids of other ranks' experts replaced by -1, and tokens
    with none of this rank's experts left out."""
    if params["num_send_tokens"] == 0:
        return torch.empty((0, params["num_topk"]), dtype=torch.int64, device=config.get_device())
    idx, local = _draw_topk(params)
    remote = idx >= local
    idx[remote] = -1
    return idx[~remote.all(dim=1)]


def generate_psum_layout(params: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """An expert-grouped token layout for ``params`` (a ``generate_moe_params`` dict plus ``alignment``): each local
    expert's tokens padded to a multiple of ``alignment``. Returns ``(mask, ends)``: ``mask`` (bool, one per padded
    row) is True on real tokens, ``ends`` (int32, per expert) is where each expert's real tokens end. When
    precompiling: one real token in expert 0's block of ``alignment`` rows, every expert's end at ``alignment``
    except expert 0's at 1."""
    num_experts = params["num_experts"]
    alignment = params["alignment"]
    device = config.get_device()
    if is_precompile():
        # one block of the test's own alignment (a static kernel parameter: it keys the compiled kernel)
        mask = torch.zeros((alignment,), dtype=torch.bool, device=device)
        mask[0] = True
        ends = torch.full((num_experts,), alignment, dtype=torch.int32, device=device)
        ends[0] = 1
        return mask, ends
    if params["num_send_tokens"] == 0:
        return (torch.empty((0,), dtype=torch.bool, device=device),
                torch.zeros((num_experts,), dtype=torch.int32, device=device))
    idx, local = _draw_topk(params)
    counts = torch.bincount(idx[idx < local], minlength=num_experts)
    padded = (counts + alignment - 1) // alignment * alignment
    block_ends = torch.cumsum(padded, dim=0, dtype=torch.int32)
    starts = block_ends - padded
    total = int(block_ends[-1])
    rows = torch.arange(total, device=device)
    owner = torch.searchsorted(block_ends, rows.to(block_ends.dtype), right=True)  # the expert whose block holds a row
    mask = rows < (starts + counts)[owner]
    return mask, (starts + counts).to(torch.int32)


def generate_rand_float(shape: tuple[int, ...]) -> torch.Tensor:
    """fp32 normal samples of ``shape`` scaled by ``2**e`` for one ``e`` drawn uniformly from -110..126 (Python's
    ``random``), so tests see scale factors over the whole exponent range; samples that overflow are redrawn
    unscaled, and the result is clamped to +-(fp32 max / 8)."""
    from kernelkiln.rand import randn
    device = config.get_device()
    exponent = random.randint(-110, 126)
    x = randn(shape, dtype=torch.float32, device=device) * float(2 ** exponent)
    bad = torch.isnan(x) | torch.isinf(x)
    if bad.any():
        x[bad] = randn((int(bad.sum()),), dtype=torch.float32, device=device)
    limit = torch.finfo(torch.float32).max / 8
    return x.clamp(-limit, limit)
