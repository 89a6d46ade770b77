"""The GPU timer of the benchmarks and of the ``benchmark_timer`` fixture (no pytest import).

The method of docs/BENCHMARKING.md (``benchmarks/`` import it from here): the
median device time per call over ``reps`` replays of a CUDA graph holding ``calls`` back-to-back calls, so host
launch overhead is not counted; a callable that cannot be captured (a host sync, a host-side table copied per call)
falls back to CUDA events around ``calls`` eager calls, which then include its host time.

The peer times with tilelang's ``do_bench`` (CUPTI kernel durations, L2 flushed between runs, mean over ~30 ms): the
two give different numbers for the same kernel, so baselines recorded with one are not a reference for the other.
"""

import statistics

import torch

DEFAULT_CALLS = 20
DEFAULT_REPS = 15


def _median_us_per_call(run_once, calls, reps):
    """Median over ``reps`` of the event-timed ``run_once()`` divided by ``calls``, in microseconds."""
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run_once()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


def _end_failed_capture():
    """Leave torch's CUDA RNG as a successful capture leaves it. A capture that fails at its end (a host sync inside
    it) never runs the generators' capture epilogue, so every later random op in the process would raise "Offset
    increment outside graph capture encountered unexpectedly"; a trivial capture that succeeds runs it."""
    scratch = torch.zeros(1, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scratch.add_(1)
    torch.cuda.synchronize()


def graph_time_us(fn, calls=DEFAULT_CALLS, reps=DEFAULT_REPS):
    """Median device time per call of ``fn`` from CUDA-graph replays. If ``fn`` cannot be captured the capture's
    error is raised, with torch's RNG and the caller's stream as they were (callers fall back to events)."""
    fn()  # first call outside the capture: lazy module loads and allocator growth are not capturable
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.current_stream()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception:
        torch.cuda.set_stream(stream)  # a capture that failed at its end left its side stream current
        _end_failed_capture()
        raise
    graph.replay()  # a warm replay, so the first timed one does not pay for the graph's upload
    torch.cuda.synchronize()
    return _median_us_per_call(graph.replay, calls, reps)


def event_time_us(fn, calls=DEFAULT_CALLS, reps=DEFAULT_REPS):
    """Median time per call of ``fn`` between CUDA events around ``calls`` eager calls (host time included)."""
    fn()
    torch.cuda.synchronize()

    def run_once():
        for _ in range(calls):
            fn()

    return _median_us_per_call(run_once, calls, reps)


def device_time_us(fn, calls=DEFAULT_CALLS, reps=DEFAULT_REPS):
    """``graph_time_us``, or ``event_time_us`` where ``fn`` cannot be captured. A real error in ``fn`` still raises:
    the eager path calls it again."""
    try:
        return graph_time_us(fn, calls, reps)
    except Exception:  # noqa: BLE001 - capture failures come as many exception types
        torch.cuda.synchronize()
        return event_time_us(fn, calls, reps)
