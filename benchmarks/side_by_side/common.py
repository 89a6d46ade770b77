"""The case protocol of the side-by-side benchmark."""
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch


@dataclass
class Calls:
    """``run(m)``: the call that is timed (CUDA-graph replay); it may update persistent buffers in place.
    ``once(m)``: the call whose results are compared; it must leave its inputs as they were (clone what an op
    writes in place), so that the peer and we see the same inputs. ``None``: the same as ``run``.
    ``tol``: ``None`` for bitwise equality; else ``(atol, rtol)``, the tolerance the peer's own tests use for
    this op where its results are not deterministic (atomics, split reductions)."""
    run: Callable
    once: Optional[Callable] = None
    tol: Optional[tuple] = None
    seed: Optional[int] = None  # for random ops: both packages are seeded with it before ``once``

    def compare_call(self):
        return self.once or self.run


@dataclass
class Case:
    name: str                       # the op's public name, e.g. "quant.per_token_cast"
    params: dict = field(default_factory=dict)
    build: Callable = None          # build(device) -> Calls


def sm_count(device):
    """The SM count both packages read for their per-SM partials; 132 (H100 / H200) stands in on the CPU, where
    nothing runs."""
    device = torch.device(device)
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132


def _copy(t):
    return [x.clone() for x in t] if isinstance(t, list) else t.clone()


def into(call, *init):
    """Calls for an op that writes or accumulates into caller tensors: ``call(m, *bufs)`` makes the call and returns
    what is compared. ``init`` holds the buffers' starting values (a tensor or a list of tensors; NaN for pure
    outputs) and is never written itself: ``run`` works on one persistent copy (the replays keep updating it; the
    time does not depend on the values), ``once`` on a fresh copy per call, so the peer and we start from the same
    bytes."""
    live = [_copy(t) for t in init]
    return Calls(run=lambda m: call(m, *live), once=lambda m: call(m, *map(_copy, init)))
