"""kernelkiln.testing.timing on the GPU: a callable that cannot be captured falls back to events and leaves the
process as it found it (torch's RNG usable, inside and outside a later capture, and the caller's stream current).
The leak this guards against made every random op of a later test in the same process raise."""
import pytest
import torch

from kernelkiln.testing.timing import device_time_us

pytestmark = pytest.mark.gpu


def test_an_uncapturable_callable_falls_back_to_events_and_leaves_rng_and_stream_alone():
    x = torch.randn(1 << 16, device="cuda")
    stream = torch.cuda.current_stream()
    assert device_time_us(lambda: x.sum().item(), calls=2, reps=2) > 0  # a host sync: no capture possible
    assert torch.cuda.current_stream() == stream
    torch.cuda.manual_seed(7)
    a = torch.randn(1024, device="cuda")
    torch.cuda.manual_seed(7)
    assert torch.equal(a, torch.randn(1024, device="cuda"))
    graph, out = torch.cuda.CUDAGraph(), torch.empty(1024, device="cuda")
    with torch.cuda.graph(graph):
        out.copy_(torch.rand(1024, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert out.ge(0).all() and out.lt(1).all()


def test_a_capturable_callable_is_timed_from_graph_replays():
    x = torch.randn(1 << 20, device="cuda")
    assert device_time_us(lambda: x.mul_(1.0), calls=4, reps=3) > 0
    torch.randn(16, device="cuda")
