"""v1 auxiliary MoE ops: mask_indices_by_tp, group_count, aux_fi, inplace_unique_group_indices (docs/SPEC.md §3.1).

One kernel launch each (kernels/moe/mask_indices_by_tp.py, id_histogram.py, unique_group_indices.py), no host
synchronization, so all four can be captured in a CUDA graph. The histograms use integer atomics only: the
counts, and aux_fi's one division per expert, are exact and independent of the grid size and the SM count
(the peer adds fp32 terms atomically). Argument checks follow the v1 constraints.
"""
import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln.moe._top2_sum import _int
from kernelkiln_contract.moe import ID_HISTOGRAM as HIST_CONTRACT
from kernelkiln_contract.moe import INPLACE_UNIQUE_GROUP_INDICES as UNIQUE_CONTRACT
from kernelkiln_contract.moe import MASK_INDICES_BY_TP as MASK_CONTRACT

INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
HIST_THREADS, MAX_SHARED_BINS = 256, 4096  # kernels/moe/id_histogram.py
HIST_OP = HIST_CONTRACT.op
HIST_FREQ, HIST_DIRECT = 1, 2
HIST_ELEMS_PER_THREAD = 8  # below this many ids per thread, fewer CTAs (each one flushes B bins)
UNIQUE_OP, UNIQUE_THREADS = UNIQUE_CONTRACT.op, 256
MAX_UNIQUE_COLS = 32  # a warp holds whole rows
INT32_MAX = 2**31 - 1


def check_ids(name, v, dtypes=(torch.int64,)):
    checks.tensor(name, v, dtypes, ndim=2)
    if v.numel() > INT32_MAX:
        raise ValueError(f"{name} has {v.numel()} elements; at most {INT32_MAX} are supported")
    if v.numel() and v.shape[1] > 1 and v.stride(1) != 1:
        raise ValueError(f"{name} must have inner stride 1, got strides {tuple(v.stride())}")


def mask_indices_by_tp(indices, n, num_ep_ranks, tp_rank, num_tp_ranks):
    check_ids("indices", indices, INT_DTYPES)
    _int("num_ep_ranks", num_ep_ranks, 1)
    _int("n", n, num_ep_ranks)
    _int("num_tp_ranks", num_tp_ranks, 1)
    _int("tp_rank", tp_rank, 0, num_tp_ranks - 1)
    t, k = indices.shape
    out = torch.empty((t, k), dtype=indices.dtype, device=indices.device)
    if out.numel() == 0:
        return out
    checks.cuda("indices", indices)
    per_gpu = n // num_ep_ranks
    launch(MASK_CONTRACT, MASK_CONTRACT.key(dtype=str(indices.dtype).removeprefix("torch.")), indices.device,
           indices=indices.data_ptr(), out=out.data_ptr(), numel=t * k, num_cols=k, row_stride=indices.stride(0),
           per_gpu=per_gpu, per_dp=per_gpu * num_tp_ranks, num_tp_ranks=num_tp_ranks, tp_rank=tp_rank)
    return out


def _histogram(name, ids, num_bins, freq=None, scale=0, den=0.0):
    """int32 counts [B] of the ids in [0, B) (the first B words of a zeroed [B + 1] buffer), and with
    ``freq`` given, freq[b] = fp32(counts[b] * scale) / den written by the last CTA."""
    t, k = ids.shape
    counts = torch.zeros((num_bins + (freq is not None),), dtype=torch.int32, device=ids.device)
    numel = t * k
    if numel == 0:
        if freq is not None:
            freq.zero_()
        return counts[:num_bins]
    checks.cuda(name, ids)
    ctas = max(1, min(-(-numel // (HIST_THREADS * HIST_ELEMS_PER_THREAD)), 2 * config.get_device_num_sms(ids.device)))
    per_cta = -(-numel // ctas)
    flags = (HIST_FREQ if freq is not None else 0) | (HIST_DIRECT if num_bins > MAX_SHARED_BINS else 0)
    launch(HIST_CONTRACT, HIST_CONTRACT.key(threads=HIST_THREADS), ids.device,
           ids=ids.data_ptr(), counts=counts.data_ptr(), freq=(freq if freq is not None else counts).data_ptr(),
           numel=numel, num_cols=k, row_stride=ids.stride(0), num_bins=num_bins, per_cta=per_cta, num_ctas=ctas,
           scale=scale, den=den, flags=flags)
    return counts[:num_bins]


def group_count(group_idx, num_groups):
    check_ids("group_idx", group_idx)
    _int("num_groups", num_groups, 1, INT32_MAX - 1)
    return _histogram("group_idx", group_idx, num_groups)


def aux_fi(topk_idx, num_experts, num_aux_topk):
    check_ids("topk_idx", topk_idx)
    _int("num_experts", num_experts, 1, INT32_MAX - 1)
    _int("num_aux_topk", num_aux_topk, 1)
    freq = torch.empty((num_experts,), dtype=torch.float32, device=topk_idx.device)
    # the reference's fp32(max(T * num_aux_topk, 1)): the launch packs the float as fp32 (round to nearest)
    _histogram("topk_idx", topk_idx, num_experts, freq, num_experts, float(max(topk_idx.shape[0] * num_aux_topk, 1)))
    return freq


def inplace_unique_group_indices(group_indices, num_groups):
    check_ids("group_indices", group_indices)
    _int("num_groups", num_groups, 1, 128)
    t, k = group_indices.shape
    if k > MAX_UNIQUE_COLS:
        raise ValueError(f"group_indices.shape[1] must be at most {MAX_UNIQUE_COLS}, got {k}")
    if t == 0 or k == 0:
        return
    checks.cuda("group_indices", group_indices)
    rows_per_warp = 32 // k
    ctas = -(-t // (rows_per_warp * (UNIQUE_THREADS // 32)))
    launch(UNIQUE_CONTRACT, UNIQUE_CONTRACT.key(threads=UNIQUE_THREADS), group_indices.device,
           ids=group_indices.data_ptr(), num_rows=t, num_cols=k, row_stride=group_indices.stride(0),
           rows_per_warp=rows_per_warp, num_ctas=ctas)
