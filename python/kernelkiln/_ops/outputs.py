"""Fresh output tensors for the launch plans, allocated with the least host time torch offers.

``torch.empty_like(template)`` parses one tensor argument where ``torch.empty(t, w, dtype=..., device=...)`` parses
sizes and keywords. The template is a single element expanded to [t, w] (stride 0, so it holds no memory for its
size); empty_like of a tensor that is not dense allocates a fresh contiguous one. On the H200, a [128, 7168] e4m3
output took 0.1-1.2 us less this way than with torch.empty(t, w, dtype=..., device=...) in each of nine processes on
two machines (1.8-4.1 us against 2.0-4.4 us; benchmarks/bench_host_parts.py, parts interleaved within a process;
benchmarks/results/2026-12-01-78efbdbe48). The plans allocate one or two outputs per call.
"""
import torch

_MAX_TEMPLATES = 256  # token counts remembered per output; beyond that the cache starts over


class RowOutputs(dict):
    """``torch.empty_like(outputs[t])`` is a new contiguous [t, width] tensor of ``dtype`` on ``device``."""

    def __init__(self, width, dtype, device):
        super().__init__()
        self.width = width
        self.one = torch.empty(1, 1, dtype=dtype, device=device)

    def __missing__(self, t):
        if len(self) >= _MAX_TEMPLATES:
            self.clear()
        # A [1, 1] expansion would have stride (0, 0) and count as dense, so empty_like would copy those strides:
        # that shape takes the real one-element tensor (strides (1, 1)) instead.
        template = self.one.expand(t, self.width) if t * self.width > 1 else self.one
        self[t] = template
        return template
