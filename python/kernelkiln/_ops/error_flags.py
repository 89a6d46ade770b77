"""Per-device error words in pinned, host-mapped memory: how kernels report bad input.

A device assert (what the peer uses) kills the CUDA context. Instead a kernel writes an error
code and a location into a few int32 words that the host reads without synchronizing; the op
family raises its Python exception at the next call or in ``check_errors()``.
"""
import ctypes
import threading

import torch


class HostMappedWords:
    """``words(device_index) -> (pinned int32 tensor of n words, ctypes view of it)``, allocated once per device."""

    def __init__(self, n):
        self.n = n
        self._per_device = {}
        self._lock = threading.Lock()

    def __call__(self, device_index):
        f = self._per_device.get(device_index)
        if f is None:
            with self._lock:
                f = self._per_device.get(device_index)
                if f is None:
                    with torch.cuda.device(device_index):
                        t = torch.zeros(self.n, dtype=torch.int32, pin_memory=True)
                    f = (t, (ctypes.c_int32 * self.n).from_address(t.data_ptr()))
                    self._per_device[device_index] = f
        return f
