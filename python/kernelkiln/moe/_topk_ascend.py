"""topk_gate on an Ascend NPU: the call kernelkiln.moe.topk_gate makes when ``scores`` is on an NPU.

kernelkiln.moe._topk validates the call once for both backends and hands NPU scores here; the Ascend kernel
(kernels/moe/topk_gate_ascend.py, declared as ``TOPK_GATE.ascend``) writes the same indices as the CUDA kernel (the
K largest scores per row, ties to the smaller expert index) into a fresh int64 [T, K] tensor.

Non-finite scores: as on CUDA, the kernel writes -1 in those rows and records (1, row) in an error word, here a
per-NPU int32 [2] tensor in device memory. Reading it synchronizes, so the error is raised by
``check_errors("npu:<i>")`` (kernelkiln.moe / kernelkiln.check_errors with an NPU device) or right after the launch
with ``set_sync_checks(True)`` / ``KERNELKILN_SYNC_CHECKS=1``, not at the next call as on CUDA (where the word is
host-mapped memory that the host reads without synchronizing).
"""
import threading

import torch

from kernelkiln._ops import ascend, checks
from kernelkiln_contract.moe import TOPK_GATE as CONTRACT
from kernelkiln_contract.moe import ascend_vregs

__all__ = []  # the Ascend path of kernelkiln.moe.topk_gate; nothing public of its own

_words = {}  # NPU index -> its error word: int32 [2] (flag, a token), zero until a kernel sees a non-finite score
_lock = threading.Lock()


def _word(device):
    w = _words.get(device.index)
    if w is None:
        with _lock:
            w = _words.get(device.index)
            if w is None:
                w = _words[device.index] = torch.zeros(2, dtype=torch.int32, device=device)
    return w


def raise_pending(index):
    """Raise the error a topk_gate kernel recorded on NPU ``index`` (and clear it); reading the word waits for the
    kernels queued before it on the current stream."""
    w = _words.get(index)
    if w is None:
        return
    flag, token = (int(v) for v in w.cpu().tolist())
    if flag:
        w.zero_()
        from kernelkiln.moe._topk import NonFiniteScoresError
        raise NonFiniteScoresError(
            f"topk_gate on npu:{index} found non-finite (NaN or inf) scores (e.g. token {token}); the indices of "
            "those rows were written as -1. Raised by check_errors() or with sync checks on (on an NPU the error "
            "word is device memory: reading it synchronizes).")


def topk_gate(scores, num_topk):
    """Indices [T, K] int64 of the validated ``scores`` [T, E] (fp32, contiguous) on an NPU."""
    t, e = scores.shape
    idx = torch.empty((t, num_topk), dtype=torch.int64, device=scores.device)
    if t == 0:
        return idx
    values = ascend.variant(CONTRACT, num_vregs=ascend_vregs(e))
    ascend.launch(CONTRACT, values, scores.device, scores=scores.data_ptr(), topk_idx=idx.data_ptr(),
                  err=_word(scores.device).data_ptr(), num_tokens=t, num_experts=e, num_topk=num_topk)
    if checks.sync_checks[0]:
        raise_pending(ascend.device_index(scores.device))
    return idx
