"""Kernels that exercise loader features no op uses yet (TMA descriptors, clusters).

``tma_copy`` runs kernels/selftest/tma_copy.py: its store is a TMA bulk copy whose
descriptor the loader encodes per call, and it launches as 2-CTA clusters.
"""
import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import kernel, raw_stream
from kernelkiln_contract.selftest import SELFTEST_TMA_COPY as CONTRACT

COLS = 256


def tma_copy(src):
    """A copy of ``src`` ([rows, 256] fp32, contiguous) made by the TMA self-test kernel."""
    checks.tensor("src", src, (torch.float32,), ndim=2)
    if src.shape[1] != COLS or not src.is_contiguous():
        raise ValueError(f"src must be contiguous with {COLS} columns, got shape {tuple(src.shape)}")
    checks.cuda("src", src)
    checks.aligned("src", src, 16)
    dst = torch.empty_like(src)
    if src.shape[0]:
        index = src.device.index
        k = kernel(CONTRACT, CONTRACT.key(dtype="float32"), index)
        # the tensors themselves, by name: bind() reads the row count (the buffers' shape symbol) from them, which
        # launch(), taking data pointers, cannot
        tensors = {"src": src, "dst": dst}
        k.launch(index, raw_stream(index), k.bind(*(tensors[n] for n in k.arg_names)), config.get_pdl())
    return dst
