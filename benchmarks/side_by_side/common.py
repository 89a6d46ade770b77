"""The case protocol of the side-by-side benchmark."""
from dataclasses import dataclass, field
from typing import Callable, Optional


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
