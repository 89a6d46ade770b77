"""GPU memory plugin: measure each test's peak CUDA memory, keep the peaks as profiles, and mark the tests that need
much memory (``large_gpu_mem``) so a runner can give them a stage of their own with fewer parallel workers.

Load it by name (``pytest_plugins = ["kernelkiln.testing.pytest.gpu_mem"]``); it is the counterpart of the peer's
``tile_kernels.testing.pytest.gpu_mem`` with the same options, marker, environment and files.

Options:

* ``--gpu-mem-output PATH``: measure every test and append ``{"test_id", "peak_gpu_mb"}`` to PATH (JSONL) for each
  test whose setup, call and teardown passed. The peak is ``torch.cuda.max_memory_allocated()`` above what was
  allocated when the test started, in MiB to one decimal.
* ``--refresh-mem``: measure (into a temporary output file when ``--gpu-mem-output`` is not given) and, if the run
  passes, merge the peaks into the profile shards by ``TK_TEST_MERGE_MODE`` (see ``common``). In ``fill`` mode the
  tests that already have a profile are deselected, and the shards are also written every
  ``--gpu-mem-flush-interval`` seconds (default 300; 0 or less: only at the end), so a long run that dies keeps what
  it measured.
* ``--gpu-mem-threshold MB`` (default 15000): a test whose profile peaks above it, or that has no profile, is marked
  ``large_gpu_mem``.

Environment: ``TK_GPU_MEM_PROFILES_DIR``, the shard directory (no default: without it no test has a profile, and
``--refresh-mem`` is a usage error, where the peer fails at the end of the run), ``TK_TESTS_DIR`` (the root that
test ids are relative to; tests outside it are neither measured into a shard nor looked up).

Files: one JSONL shard per test file (``quant/test_x.py`` -> ``quant/test_x.jsonl``), one ``{"test_id": ...,
"peak_gpu_mb": ...}`` per line sorted by id; ids are ``<file relative to the tests root>::<rest of the node id>``
with any ``num_sms=...`` field of the parametrize id dropped (the peak is taken not to depend on the SM count; the
variants share one entry, the largest peak).

Difference from the peer: where torch sees no CUDA device, measuring (``--gpu-mem-output`` / ``--refresh-mem``)
skips each test with the reason instead of failing in ``torch.cuda``; without those options nothing changes.
"""

import dataclasses
import gc
import os
import threading

import pytest

from kernelkiln.testing.pytest import common

_OUTPUT_ENV = "_TK_GPU_MEM_OUTPUT"  # the shared temporary output file, for xdist workers (the peer's name)
_MIB = 1024 * 1024


@dataclasses.dataclass
class _RunState:
    output: str | None
    own_output: bool
    before_run: dict | None = None  # the profiles as they were when the run started (the controller's refresh)
    flush_stop: threading.Event | None = None
    flush_thread: threading.Thread | None = None
    fill_deselected: int = 0
    unknown: int = 0
    update: dict | None = None


_STATE = pytest.StashKey[_RunState]()
_MEASURED = pytest.StashKey[dict]()  # item -> its record, set by the autouse fixture
_FAILED = pytest.StashKey[bool]()  # item -> a phase of it failed
# The final refresh and the periodic flush thread may run at the same time: one at a time writes the shards.
_refresh_lock = threading.Lock()


def _profiles_dir(config):
    return os.environ.get("TK_GPU_MEM_PROFILES_DIR", "") or None


def _output(config):
    return config.getoption("--gpu-mem-output", default=None)


# --- options, marker, collection ------------------------------------------------------------------------------------


def pytest_addoption(parser):
    parser.addoption(
        "--gpu-mem-output",
        default=None,
        help="Append each test's peak GPU memory to this file as JSONL (the input of a profile refresh)",
    )
    parser.addoption(
        "--refresh-mem",
        action="store_true",
        default=False,
        help="Measure each test's peak GPU memory and merge it into the GPU memory profile shards",
    )
    parser.addoption(
        "--gpu-mem-threshold",
        type=float,
        default=15000.0,
        help="Peak GPU memory in MB above which a test is large_gpu_mem, run in the isolated stage 2 "
        "with fewer workers (default: 15000, about 15 GB)",
    )
    parser.addoption(
        "--gpu-mem-flush-interval",
        type=float,
        default=300.0,
        help="Seconds between writes of the profile shards during a fill-mode refresh (default: 300)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "large_gpu_mem: needs much GPU memory (run apart, with fewer workers)")
    output, own = _output(config), False
    if config.getoption("--refresh-mem", default=False):
        common.validate_merge_mode()
        if _profiles_dir(config) is None:
            raise pytest.UsageError("--refresh-mem needs TK_GPU_MEM_PROFILES_DIR, the GPU memory profiles directory")
        if output is None:
            output, own = common.shared_output_file(_OUTPUT_ENV, "gpu_mem_")
            config.option.gpu_mem_output = output
    state = config.stash[_STATE] = _RunState(output=output, own_output=own and not common.is_xdist_worker(config))
    if config.getoption("--refresh-mem", default=False) and not common.is_xdist_worker(config):
        # Taken before the flush thread writes anything, so the final counts compare with the run's start.
        state.before_run = _load_profiles(_profiles_dir(config))
        if common.merge_mode() == "fill":
            _start_flushing(config, state)


def pytest_unconfigure(config):
    state = config.stash.get(_STATE, None)
    if state is not None:
        _stop_flushing(state)
        if state.own_output:
            common.release_shared_output_file(_OUTPUT_ENV, state.output)


def pytest_collection_modifyitems(config, items):
    state = config.stash[_STATE]
    profiles = _load_profiles(_profiles_dir(config))
    if config.getoption("--refresh-mem", default=False) and common.merge_mode() == "fill":
        keep = [item for item in items if _mem_key(item) not in profiles]
        if len(keep) < len(items):
            config.hook.pytest_deselected(items=[item for item in items if _mem_key(item) in profiles])
            state.fill_deselected = len(items) - len(keep)
            items[:] = keep
    threshold = config.getoption("--gpu-mem-threshold")
    for item in items:
        if "large_gpu_mem" in item.keywords:
            continue
        profile = profiles.get(_mem_key(item))
        if profile is None:
            state.unknown += 1  # unmeasured: assume the worst
            item.add_marker(pytest.mark.large_gpu_mem)
        elif profile["peak_gpu_mb"] > threshold:
            item.add_marker(pytest.mark.large_gpu_mem)


# --- keys -----------------------------------------------------------------------------------------------------------


def _normalize_key(key):
    """Drop ``num_sms=`` fields from the trailing ``[...]`` id and rebuild it without a trailing comma, so
    ``[a=1,num_sms=8,]``, ``[a=1,num_sms=4]`` and ``[a=1]`` are one key."""
    head, bracket, tail = key.rpartition("[")
    if not bracket or not tail.endswith("]"):
        return key
    kept = [f for f in tail[:-1].split(",") if f and not f.startswith("num_sms=")]
    return f"{head}[{','.join(kept)}]" if kept else head


def _mem_key(item):
    """The item's profile id, or None outside the tests root. Built from the item's path, not from its node id, so
    it does not depend on where pytest was started."""
    source_file = common.item_source_file(item)
    if source_file is None:
        return None
    _, sep, rest = item.nodeid.partition("::")
    return _normalize_key(f"{source_file}{sep}{rest}")


def _source_file_of(test_id):
    source_file = test_id.split("::", 1)[0]
    return source_file if source_file.endswith(".py") else None


def _keep_larger(profiles, test_id, peak_mb):
    if test_id not in profiles or peak_mb > profiles[test_id]["peak_gpu_mb"]:
        profiles[test_id] = {"peak_gpu_mb": peak_mb}


# --- profile shards -------------------------------------------------------------------------------------------------


def _load_profiles(directory):
    """``{test_id: {"peak_gpu_mb": float}}`` of every shard (ids normalized, the larger peak on a collision)."""
    profiles = {}
    for path, _ in common.jsonl_files(directory):
        for record in common.read_jsonl(path):
            _keep_larger(profiles, _normalize_key(record["test_id"]), record["peak_gpu_mb"])
    return profiles


def _merge_profiles(current, before_run, measured, mode):
    """The profiles after merging ``measured`` into ``current`` (the shards now) by ``mode``, with the counts.
    ``before_run`` (the shards when the run started) decides what is new, updated or removed, so entries the flush
    thread already wrote during this run still count as new."""
    touched = {_source_file_of(t) for t in measured} - {None}
    if mode == "overwrite":
        merged = {t: v for t, v in current.items() if _source_file_of(t) not in touched}
        applied = measured
        removed = sum(1 for t in before_run if _source_file_of(t) in touched and t not in measured)
    else:
        merged = dict(current)
        applied = measured if mode == "replace" else {t: v for t, v in measured.items() if t not in before_run}
        removed = 0
    merged.update(applied)
    updated = sum(1 for t in applied if t in before_run)
    return merged, touched, {"num_updated": updated, "num_added": len(applied) - updated, "num_removed": removed}


def _write_profile_shards(directory, profiles, touched):
    by_file = {}
    for test_id, value in sorted(profiles.items()):
        by_file.setdefault(_source_file_of(test_id), []).append({"test_id": test_id, "peak_gpu_mb": value["peak_gpu_mb"]})
    for source_file in touched:
        common.write_jsonl(common.shard_path(directory, source_file), by_file.get(source_file, []))


def _refresh_profiles(config):
    with _refresh_lock:
        directory, state = _profiles_dir(config), config.stash[_STATE]
        records = common.read_jsonl(state.output, skip_bad_lines=True)
        if not records:
            return {"updated": False, "reason": "no GPU memory records were collected", "path": directory}
        measured = {}
        for record in records:  # xdist workers append in any order; the num_sms variants keep the largest peak
            _keep_larger(measured, record["test_id"], record["peak_gpu_mb"])
        current = _load_profiles(directory)
        before_run = state.before_run if state.before_run is not None else current
        mode = common.merge_mode()
        profiles, touched, counts = _merge_profiles(current, before_run, measured, mode)
        _write_profile_shards(directory, profiles, touched)
        threshold = config.getoption("--gpu-mem-threshold")
        large = sum(1 for v in profiles.values() if v["peak_gpu_mb"] > threshold)
        return {
            "updated": True,
            "mode": mode,
            "num_profiles": len(profiles),
            "num_collected": len(measured),
            **counts,
            "num_large": large,
            "num_small": len(profiles) - large,
            "threshold": threshold,
            "path": directory,
        }


def _start_flushing(config, state):
    interval = config.getoption("--gpu-mem-flush-interval")
    if interval <= 0:
        return
    state.flush_stop = threading.Event()

    def flush_until_stopped():
        while not state.flush_stop.wait(interval):
            _refresh_profiles(config)

    state.flush_thread = threading.Thread(target=flush_until_stopped, name="gpu-mem-profile-flush", daemon=True)
    state.flush_thread.start()


def _stop_flushing(state):
    if state.flush_stop is not None:
        state.flush_stop.set()
    if state.flush_thread is not None:
        state.flush_thread.join(timeout=1.0)
        state.flush_thread = None


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if common.is_xdist_worker(config) or config.stash.get(_STATE, None) is None:
        return
    state = config.stash[_STATE]
    _stop_flushing(state)  # first, so the last flush cannot race the final write
    if exitstatus == 0 and config.getoption("--refresh-mem", default=False):
        state.update = _refresh_profiles(config)


# --- measuring ------------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _track_gpu_peak_memory(request):
    """Measure the test's peak CUDA memory when an output file is in use; otherwise do nothing."""
    if _output(request.config) is None:
        yield
        return
    if not common.cuda_available():
        pytest.skip("GPU memory profiling (--gpu-mem-output / --refresh-mem) needs a CUDA device; torch sees none")
    import torch

    gc.collect()  # free what earlier tests left behind, so it is not counted as this test's
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    allocated_before = torch.cuda.memory_allocated()
    yield
    key = _mem_key(request.node)
    if key is not None:
        peak_mb = max(torch.cuda.max_memory_allocated() - allocated_before, 0) / _MIB
        request.node.stash[_MEASURED] = {"test_id": key, "peak_gpu_mb": round(peak_mb, 1)}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    output = _output(item.config)
    if output is not None:
        if report.failed:
            item.stash[_FAILED] = True
        # written after teardown, and only for a test that passed every phase: a failure's peak says nothing
        if call.when == "teardown" and not item.stash.get(_FAILED, False) and _MEASURED in item.stash:
            common.append_jsonl(output, item.stash[_MEASURED])
    return report


# --- terminal report ------------------------------------------------------------------------------------------------


def _write_update(tr, update):
    tr.section("GPU Memory Profile Refresh")
    if not update["updated"]:
        tr.write_line(f"Skipped: {update['reason']}")
        tr.write_line(f"Output: {update['path']}")
    else:
        tr.write_line(f"Output: {update['path']}")
        tr.write_line(
            f"Mode: {update['mode']}, {update['num_collected']} collected, {update['num_updated']} updated, "
            f"{update['num_added']} new, {update['num_removed']} removed, "
            f"{update['num_profiles']} total profiles"
        )
        limit = f"{update['threshold']:.0f} MB"
        tr.write_line(
            f"Stage 1 (parallel): {update['num_small']} test(s) <= {limit}; "
            f"Stage 2 (isolated): {update['num_large']} test(s) > {limit}"
        )
    tr.write_line("")


def _write_measured(tr, records, threshold):
    tr.section("GPU Memory Profile Report")
    tr.write_line(f"Threshold: {threshold:.0f} MB ({threshold / 1024:.1f} GB)")
    tr.write_line("")
    records = sorted(records, key=lambda r: r["peak_gpu_mb"], reverse=True)
    names = [r["test_id"] if len(r["test_id"]) <= 78 else "..." + r["test_id"][-75:] for r in records]
    width = max([len("Test")] + [len(n) for n in names])
    header = f"{'Test':<{width}} {'Peak MB':>10} {'Class':>8}"
    tr.write_line(header)
    tr.write_line("-" * len(header))
    large = 0
    for record, name in zip(records, names):
        is_large = record["peak_gpu_mb"] > threshold
        large += is_large
        tr.write_line(f"{name:<{width}} {record['peak_gpu_mb']:>9.1f} {'LARGE' if is_large else 'ok':>8}")
    tr.write_line("")
    tr.write_line(
        f"Total: {len(records)} tests profiled, {large} above threshold ({threshold:.0f} MB), {len(records) - large} below."
    )


def pytest_terminal_summary(terminalreporter, config):
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    tr = terminalreporter
    if state.fill_deselected:
        tr.section("GPU Memory Fill Refresh")
        tr.write_line(f"Skipped {state.fill_deselected} test(s) already present in {_profiles_dir(config)}.")
        tr.write_line("")
    if state.update is not None:
        _write_update(tr, state.update)
    if state.output is None:
        if state.unknown:
            tr.section("GPU Memory Auto-Classification")
            tr.write_line(
                f"{state.unknown} test(s) have no GPU memory profile and were conservatively classified "
                "as large_gpu_mem (Stage 2)."
            )
            tr.write_line("Run pytest with '--refresh-mem' to measure and record their actual GPU memory usage.")
        return
    records = common.read_jsonl(state.output, skip_bad_lines=True)
    if records:
        _write_measured(tr, records, config.getoption("--gpu-mem-threshold"))
