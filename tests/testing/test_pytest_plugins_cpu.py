"""The pytest plugins of kernelkiln.testing.pytest (the peer's tile_kernels.testing.pytest), each loaded by its dotted
name from an inner suite's conftest as a user's conftest loads it, run through pytester: options, markers, the JSONL
records and the baseline / profile shards in the peer's format, regression detection and the fail modes, the merge
modes, the -K expressions, seeding, the TileLang warning summary, the TK_PRECOMPILE selection and the xdist
fail-fast logic (without xdist; with it where it is installed). Measuring on a GPU is marked ``gpu``."""

import hashlib
import importlib
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

import kernelkiln
from kernelkiln.testing.pytest import xdist_failfast

pytest_plugins = ["pytester"]

HAS_GPU = torch.cuda.is_available()
PLUGIN = "kernelkiln.testing.pytest."
# Imported here so that pytester's in-process runs find them already loaded: it drops the modules a run imports.
importlib.import_module("kernelkiln.testing.timing")
for _name in ("common", "benchmark", "gpu_mem", "random", "tilelang_warning", "precompile"):
    importlib.import_module(PLUGIN + _name)
ENV = (
    "TK_TESTS_DIR",
    "TK_BENCHMARK_TESTS_DIR",
    "TK_BENCHMARK_BASELINES_DIR",
    "TK_GPU_MEM_PROFILES_DIR",
    "TK_BENCHMARK_FAIL_MODE",
    "TK_BENCHMARK_REGRESSION_THRESHOLD",
    "TK_BENCHMARK_MIN_DELTA_US",
    "TK_TEST_MERGE_MODE",
    "TK_PRECOMPILE",
    "_TK_BENCHMARK_OUTPUT",
    "_TK_GPU_MEM_OUTPUT",
)


@pytest.fixture
def suite(pytester, monkeypatch):
    """An inner suite rooted at pytester.path (also the tests root), with no TK_* setting from outside."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TK_TESTS_DIR", str(pytester.path))
    # Entry-point plugins (hypothesis) would be imported and assertion-rewritten again in every in-process run.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    # The plugin modules are imported already (above), too late for assertion rewriting: not worth a warning. The
    # unraisable-exception plugin runs gc.collect() five times per session, 0.1 s each with torch's heap loaded.
    pytester.makeini(
        "[pytest]\nfilterwarnings = ignore::pytest.PytestAssertRewriteWarning\n"
        "addopts = -p no:unraisableexception -p no:cacheprovider\n"
    )

    def load(*plugins, extra=""):
        names = ", ".join(repr(PLUGIN + p) for p in plugins)
        pytester.makeconftest(f"pytest_plugins = [{names}]\n{extra}")
        return pytester

    return load


def _read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _write_jsonl(path, records):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


# --- every plugin at once -------------------------------------------------------------------------------------------


def test_all_plugins_load_by_name_with_the_peers_options_and_markers(suite):
    p = suite("benchmark", "gpu_mem", "random", "tilelang_warning", "xdist_failfast", "precompile")
    p.makepyfile(
        test_defaults="""
        def test_defaults(pytestconfig):
            get = pytestconfig.getoption
            assert get("--run-benchmark") is False and get("--benchmark-output") is None
            assert get("--benchmark-verbose") is False and get("--key-filter") == []
            assert get("--refresh-baseline") is False and get("--refresh-mem") is False
            assert get("--gpu-mem-output") is None and get("--seed") == 0
            assert get("--gpu-mem-threshold") == 15000.0 and get("--gpu-mem-flush-interval") == 300.0
    """
    )
    r = p.runpytest()
    r.assert_outcomes(passed=1)
    help_text = p.runpytest("--help").stdout.str()
    for option in (
        "--run-benchmark",
        "--benchmark-output",
        "--benchmark-verbose",
        "-K KEY_FILTER, --key-filter",
        "--refresh-baseline",
        "--gpu-mem-output",
        "--refresh-mem",
        "--gpu-mem-threshold",
        "--gpu-mem-flush-interval",
        "--seed",
    ):
        assert option in help_text, option
    markers = p.runpytest("--markers").stdout.str()
    assert "@pytest.mark.benchmark:" in markers and "@pytest.mark.large_gpu_mem:" in markers


def test_importing_the_testing_helpers_imports_no_pytest():
    """The plugins are loaded by name only: kernelkiln.testing and the plugin package itself stay free of pytest (and
    no plugin brings in tilelang or tvm)."""
    code = (
        "import sys, kernelkiln.testing, kernelkiln.testing.pytest, kernelkiln.testing.timing; "
        "bad = {'pytest', 'tilelang', 'tvm'} & set(sys.modules); assert not bad, bad; "
        "import kernelkiln.testing.pytest.benchmark, kernelkiln.testing.pytest.tilelang_warning; "
        "bad = {'tilelang', 'tvm'} & set(sys.modules); assert not bad, bad"
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(Path(kernelkiln.__file__).parent.parent), os.environ.get("PYTHONPATH", "")])
    )
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


# --- benchmark ------------------------------------------------------------------------------------------------------

BENCH_SUITE = """
    import os
    import pytest
    from kernelkiln.testing.bench import make_param_id

    PARAMS = [{"num_tokens": 128, "hidden": 7168}, {"num_tokens": 4096, "hidden": 7168}]

    @pytest.mark.benchmark
    @pytest.mark.parametrize("params", PARAMS, ids=make_param_id)
    def test_cast(params, benchmark_record):
        scale = float(os.environ.get("INNER_SCALE", "1"))
        benchmark_record(kernel="cast", operation="fwd", params={**params, "derived": 3},
                         time_us=params["num_tokens"] / 100 * scale, bandwidth_gbs=1234.56789,
                         extras={"speedup": 1.234567, "note": "x"})

    @pytest.mark.benchmark
    def test_single(benchmark_record):
        benchmark_record(kernel="cast", operation="single", params={"n": 1}, time_us=10.0)

    def test_plain():
        pass
"""

KEY_128 = "cast/fwd[num_tokens=128,hidden=7168,]"


def _bench_suite(suite):
    p = suite("benchmark")
    p.makepyfile(test_bench=BENCH_SUITE)
    return p


def test_benchmarks_skip_without_run_benchmark(suite):
    p = _bench_suite(suite)
    r = p.runpytest("-rs")
    r.assert_outcomes(passed=1, skipped=3)
    r.stdout.fnmatch_lines(["*need --run-benchmark to run*"])
    assert "Benchmark Regression Report" not in r.stdout.str()


def test_records_are_written_in_the_peers_jsonl_format(suite, tmp_path):
    p = _bench_suite(suite)
    out = tmp_path / "bench.jsonl"
    r = p.runpytest("--run-benchmark", f"--benchmark-output={out}", "-s")
    r.assert_outcomes(passed=4)
    assert r.ret == 0  # records without a baseline fail only in a missing* fail mode
    records = _read_jsonl(out)
    assert len(records) == 3
    first = records[0]
    assert first == {
        "kernel": "cast",
        "operation": "fwd",
        "params": {"derived": 3, "hidden": 7168, "num_tokens": 128},
        "param_id": "num_tokens=128,hidden=7168,",
        "source_file": "test_bench.py",
        "time_us": 1.28,
        "extra_params": {"derived": 3},
        "bandwidth_gbs": 1234.5679,
        "extras": {"speedup": 1.2346, "note": "x"},
    }
    assert list(first) == [
        "kernel",
        "operation",
        "params",
        "param_id",
        "source_file",
        "time_us",
        "extra_params",
        "bandwidth_gbs",
        "extras",
    ]
    assert records[2] == {
        "kernel": "cast",
        "operation": "single",
        "params": {"n": 1},
        "param_id": None,
        "source_file": "test_bench.py",
        "time_us": 10.0,
    }
    text = r.stdout.str()
    assert (
        "BENCH cast/fwd[num_tokens=128,  hidden=7168,] {derived=3}: 1.3 us, bandwidth_gbs=1234.57, speedup=1.23, note=x" in text
    )
    assert "No baseline file found" in text
    assert "Total: 3 benchmarks, 0 with baselines, 3 missing, 0 regressions, 0 improvements (threshold: 5%)" in text


def test_missing_fail_modes_and_a_shared_temporary_output(suite, monkeypatch):
    p = _bench_suite(suite)
    monkeypatch.setenv("TK_BENCHMARK_FAIL_MODE", "missing")
    r = p.runpytest("--run-benchmark")  # no --benchmark-output: a temporary file, removed afterwards
    assert r.ret == 1 and "3 missing" in r.stdout.str()
    assert "_TK_BENCHMARK_OUTPUT" not in os.environ
    monkeypatch.setenv("TK_BENCHMARK_FAIL_MODE", "missing-regression")
    assert p.runpytest("--run-benchmark").ret == 1
    monkeypatch.setenv("TK_BENCHMARK_FAIL_MODE", "regression")
    assert p.runpytest("--run-benchmark").ret == 0
    monkeypatch.setenv("TK_BENCHMARK_FAIL_MODE", "Missing")  # the peer's reading: case-insensitive
    assert p.runpytest("--run-benchmark").ret == 1
    monkeypatch.setenv("TK_BENCHMARK_FAIL_MODE", "sometimes")  # unknown: the exit code ignores the benchmarks
    r = p.runpytest("--run-benchmark")
    assert r.ret == 0 and "TK_BENCHMARK_FAIL_MODE='sometimes' is not one of" in r.stdout.str()


def test_refresh_then_detect_regressions_and_improvements(suite, monkeypatch):
    p = _bench_suite(suite)
    r = p.runpytest("--run-benchmark", "--refresh-baseline")
    r.assert_outcomes(passed=3, deselected=1)  # --refresh-baseline runs the benchmarks alone
    assert r.ret == 0
    shard = p.path / "benchmark_baselines" / "test_bench.jsonl"
    rows = _read_jsonl(shard)
    # sorted by key, without source_file (the shard's path says it)
    assert [(r["operation"], r.get("param_id")) for r in rows] == [
        ("fwd", "num_tokens=128,hidden=7168,"),
        ("fwd", "num_tokens=4096,hidden=7168,"),
        ("single", None),
    ]
    assert all("source_file" not in r for r in rows) and rows[0]["time_us"] == 1.28
    assert "Mode: replace, 0 updated, 3 new, 0 removed, 3 total benchmarks, 1 shard(s) touched" in r.stdout.str()

    monkeypatch.setenv("INNER_SCALE", "2")  # 1.28 -> 2.56 us and 40.96 -> 81.92 us: both past 5 % and 0.8 us
    r = p.runpytest("--run-benchmark")
    assert r.ret == 1
    text = r.stdout.str()
    assert "!! REGRESSIONS DETECTED !!" in text and "2 regressions" in text and "PERFORMANCE REGRESSION" in text
    assert "cast/fwd[num_tokens=128,  hidden=7168,] {derived=3}: 2.6 us vs baseline 1.3 us (2.00x slower)" in text
    assert _read_jsonl(shard)[0]["time_us"] == 1.28  # a plain run never writes baselines

    monkeypatch.setenv("TK_BENCHMARK_FAIL_MODE", "none")
    assert p.runpytest("--run-benchmark").ret == 0
    monkeypatch.setenv("TK_BENCHMARK_FAIL_MODE", "regression")
    monkeypatch.setenv("TK_BENCHMARK_MIN_DELTA_US", "100")  # the absolute bar: no change is 100 us
    assert p.runpytest("--run-benchmark").ret == 0

    monkeypatch.delenv("TK_BENCHMARK_MIN_DELTA_US")
    monkeypatch.setenv("INNER_SCALE", "0.5")  # 1.28 -> 0.64 us (under 0.8 us: OK), 40.96 -> 20.48 us (improved)
    r = p.runpytest("--run-benchmark")
    assert r.ret == 0
    text = r.stdout.str()
    assert "!! IMPROVEMENTS DETECTED !!" in text and "1 improvements" in text and "0 regressions" in text
    assert "(2.00x faster)" in text


def test_a_failing_run_keeps_its_exit_code_and_refreshes_nothing(suite):
    p = suite("benchmark")
    p.makepyfile(
        test_fail="""
        import pytest

        @pytest.mark.benchmark
        def test_b(benchmark_record):
            benchmark_record(kernel="k", operation="op", params={}, time_us=1.0)

        @pytest.mark.benchmark
        def test_broken():
            assert False
    """
    )
    r = p.runpytest("--run-benchmark", "--refresh-baseline")
    assert r.ret == 1 and not (p.path / "benchmark_baselines").exists()
    assert "Benchmark Regression Report" in r.stdout.str()  # still reported


@pytest.mark.parametrize(
    "mode, expected, counts",
    [
        (
            "replace",
            {
                "fwd[num_tokens=128,hidden=7168,]": 1.28,
                "fwd[stale]": 5.0,
                "fwd[num_tokens=4096,hidden=7168,]": 40.96,
                "single[n=1]": 10.0,
            },
            "1 updated, 2 new, 0 removed, 5 total",
        ),
        (
            "overwrite",
            {"fwd[num_tokens=128,hidden=7168,]": 1.28, "fwd[num_tokens=4096,hidden=7168,]": 40.96, "single[n=1]": 10.0},
            "1 updated, 2 new, 1 removed, 4 total",
        ),
        (
            "fill",
            {
                "fwd[num_tokens=128,hidden=7168,]": 99.0,
                "fwd[stale]": 5.0,
                "fwd[num_tokens=4096,hidden=7168,]": 40.96,
                "single[n=1]": 10.0,
            },
            "0 updated, 2 new, 0 removed, 5 total",
        ),
    ],
)
def test_baseline_merge_modes(suite, monkeypatch, tmp_path, mode, expected, counts):
    p = _bench_suite(suite)
    baselines = tmp_path / "baselines"  # TK_BENCHMARK_BASELINES_DIR wins over <tests>/benchmark_baselines
    monkeypatch.setenv("TK_BENCHMARK_BASELINES_DIR", str(baselines))
    monkeypatch.setenv("TK_TEST_MERGE_MODE", mode)
    other = {"kernel": "other", "operation": "op", "params": {"a": 1}, "param_id": None, "time_us": 7.0}
    _write_jsonl(baselines / "test_other.jsonl", [other])  # a shard this run does not touch
    _write_jsonl(
        baselines / "test_bench.jsonl",
        [
            {"kernel": "cast", "operation": "fwd", "params": {}, "param_id": "num_tokens=128,hidden=7168,", "time_us": 99.0},
            {"kernel": "cast", "operation": "fwd", "params": {}, "param_id": "stale", "time_us": 5.0},
        ],
    )
    r = p.runpytest("--run-benchmark", "--refresh-baseline")
    assert r.ret == 0
    rows = _read_jsonl(baselines / "test_bench.jsonl")
    got = {
        f"{r['operation']}[{r['param_id'] or ','.join(f'{k}={v}' for k, v in r['params'].items())}]": r["time_us"] for r in rows
    }
    assert got == expected and list(got) == sorted(got, key=lambda k: "cast/" + k)
    assert _read_jsonl(baselines / "test_other.jsonl") == [other]
    assert f"Mode: {mode}, {counts} benchmarks" in r.stdout.str()


def test_peer_written_baselines_are_read(suite, monkeypatch):
    """A shard as the peer writes it (its key order and separators) matches the records of this run."""
    p = _bench_suite(suite)
    line = (
        '{"kernel": "cast", "operation": "fwd", "params": {"derived": 3, "hidden": 7168, "num_tokens": 128}, '
        '"param_id": "num_tokens=128,hidden=7168,", "time_us": 1.3, "extra_params": {"derived": 3}, '
        '"bandwidth_gbs": 1200.0, "extras": {"speedup": 1.2, "note": "x"}}\n'
    )
    (p.path / "benchmark_baselines").mkdir()
    (p.path / "benchmark_baselines" / "test_bench.jsonl").write_text(line)
    r = p.runpytest("--run-benchmark", "--benchmark-verbose")
    assert r.ret == 0
    text = r.stdout.str()
    assert "Total: 3 benchmarks, 1 with baselines, 2 missing, 0 regressions, 0 improvements" in text
    assert "speedup(cur)" in text and "speedup(ref)" in text and "GEOMEAN" in text


def test_refresh_usage_errors(suite, monkeypatch):
    p = _bench_suite(suite)
    r = p.runpytest("--refresh-baseline")
    assert r.ret == pytest.ExitCode.USAGE_ERROR and "--refresh-baseline requires --run-benchmark" in r.stderr.str()
    monkeypatch.setenv("TK_TEST_MERGE_MODE", "sideways")
    r = p.runpytest("--run-benchmark", "--refresh-baseline")
    assert r.ret == pytest.ExitCode.USAGE_ERROR and "unknown TK_TEST_MERGE_MODE 'sideways'" in r.stderr.str()
    monkeypatch.delenv("TK_TEST_MERGE_MODE")
    monkeypatch.delenv("TK_TESTS_DIR")
    r = p.runpytest("--run-benchmark", "--refresh-baseline")
    assert r.ret == pytest.ExitCode.USAGE_ERROR and "TK_BENCHMARK_BASELINES_DIR" in r.stderr.str()


@pytest.mark.parametrize(
    "filters, selected",
    [
        (["cast"], {"test_cast_fwd", "test_cast_bwd"}),
        (["cast and bwd"], {"test_cast_bwd"}),
        (["cast bwd"], {"test_cast_bwd"}),  # adjacent regexes: and
        (["cast and not bwd"], {"test_cast_fwd"}),
        (["norm or bwd"], {"test_cast_bwd", "test_norm_fwd"}),
        (["not cast or bwd"], {"test_cast_bwd", "test_norm_fwd"}),  # not binds tighter than or
        (["norm", "bwd"], {"test_cast_bwd", "test_norm_fwd"}),  # repeated -K: any of them
        (["'cast_(fwd|bwd)'"], {"test_cast_fwd", "test_cast_bwd"}),
    ],
)
def test_key_filter_expressions(suite, filters, selected):
    p = suite("benchmark")
    p.makepyfile(test_k="\n".join(f"def {n}(): pass" for n in ("test_cast_fwd", "test_cast_bwd", "test_norm_fwd")))
    args = [a for f in filters for a in ("-K", f)]
    r = p.runpytest(*args, "-v")
    ran = {line.split("::")[1].split()[0] for line in r.stdout.lines if "PASSED" in line and "::" in line}
    assert ran == selected
    r.assert_outcomes(passed=len(selected), deselected=3 - len(selected))


@pytest.mark.parametrize(
    "expression, message",
    [
        ("", "cannot be empty"),
        ("cast and", "Unexpected end"),
        ("or cast", "Expected regex before 'or'"),
        ("(cast", "Invalid regex"),
        ("'cast", "No closing quotation"),
    ],
)
def test_key_filter_errors_are_usage_errors(suite, expression, message):
    p = suite("benchmark")
    p.makepyfile(test_k="def test_a(): pass")
    r = p.runpytest("-K", expression)
    assert r.ret == pytest.ExitCode.USAGE_ERROR and message in r.stderr.str()


@pytest.mark.skipif(HAS_GPU, reason="the no-GPU path (the GPU path is test_benchmark_timer_times_on_the_gpu)")
def test_benchmark_timer_skips_without_a_gpu(suite):
    p = suite("benchmark")
    p.makepyfile(
        test_t="""
        import pytest

        @pytest.mark.benchmark
        def test_t(benchmark_timer):
            raise AssertionError("not reached")
    """
    )
    r = p.runpytest("--run-benchmark", "-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*benchmark_timer measures CUDA kernels: torch sees no CUDA device*"])


@pytest.mark.gpu
def test_benchmark_timer_times_on_the_gpu(suite):
    p = suite("benchmark")
    p.makepyfile(
        test_t="""
        import pytest
        import torch

        @pytest.mark.benchmark
        def test_t(benchmark_timer, benchmark_record):
            x = torch.randn(1 << 24, device="cuda")
            graph_us = benchmark_timer(lambda: x.mul_(1.0))
            assert 0 < graph_us < 10_000
            # the peer's do_bench keywords are accepted; a host sync cannot be captured: events instead
            assert benchmark_timer(lambda: x.sum().item(), rep=30, warmup=0, backend="cupti", calls=3, reps=3) > 0
            with pytest.raises(TypeError):
                benchmark_timer(lambda: None, quantiles=[0.5])
            benchmark_record(kernel="mul", operation="inplace", params={"n": x.numel()}, time_us=graph_us,
                             bandwidth_gbs=2 * x.numel() * 4 / graph_us / 1e3)
    """
    )
    r = p.runpytest("--run-benchmark")
    r.assert_outcomes(passed=1)


# --- gpu_mem --------------------------------------------------------------------------------------------------------

MEM_SUITE = """
    import pytest

    @pytest.mark.parametrize("a", [1], ids=["a=1,num_sms=8,"])
    def test_small(a):
        pass

    def test_big():
        pass

    def test_unknown():
        pass

    @pytest.mark.large_gpu_mem
    def test_marked():
        pass
"""


def test_gpu_mem_classifies_by_profile(suite, monkeypatch, tmp_path):
    p = suite("gpu_mem")
    p.makepyfile(test_mem=MEM_SUITE)
    profiles = tmp_path / "profiles"
    monkeypatch.setenv("TK_GPU_MEM_PROFILES_DIR", str(profiles))
    # a num_sms variant shares its test's entry (the larger peak wins); ids are relative to the tests root
    _write_jsonl(
        profiles / "test_mem.jsonl",
        [
            {"test_id": "test_mem.py::test_big", "peak_gpu_mb": 20000.0},
            {"test_id": "test_mem.py::test_small[a=1]", "peak_gpu_mb": 10.0},
            {"test_id": "test_mem.py::test_small[a=1,num_sms=4,]", "peak_gpu_mb": 12.5},
        ],
    )
    r = p.runpytest("-m", "not large_gpu_mem", "-v")
    r.assert_outcomes(passed=1, deselected=3)
    r.stdout.fnmatch_lines(["*test_small*PASSED*", "*GPU Memory Auto-Classification*", "1 test(s) have no GPU memory profile*"])
    r = p.runpytest("-m", "not large_gpu_mem", "--gpu-mem-threshold", "30000")
    r.assert_outcomes(passed=2, deselected=2)
    monkeypatch.delenv("TK_GPU_MEM_PROFILES_DIR")  # no profiles: every test unmeasured, so large
    p.runpytest("-m", "not large_gpu_mem").assert_outcomes(deselected=4)


@pytest.mark.skipif(HAS_GPU, reason="the no-GPU path (the GPU path is test_gpu_mem_measures_on_the_gpu)")
def test_gpu_mem_measuring_skips_without_a_gpu(suite, tmp_path):
    p = suite("gpu_mem")
    p.makepyfile(test_mem=MEM_SUITE)
    out = tmp_path / "mem.jsonl"
    r = p.runpytest(f"--gpu-mem-output={out}", "-rs")
    r.assert_outcomes(skipped=4)
    r.stdout.fnmatch_lines(["*GPU memory profiling (--gpu-mem-output / --refresh-mem) needs a CUDA device*"])
    assert not out.exists() or not out.read_text()


@pytest.mark.gpu
def test_gpu_mem_measures_on_the_gpu(suite, tmp_path):
    p = suite("gpu_mem")
    p.makepyfile(
        test_mem="""
        import torch

        def test_alloc():
            x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
            del x

        def test_fails():
            x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
            assert False
    """
    )
    out = tmp_path / "mem.jsonl"
    r = p.runpytest(f"--gpu-mem-output={out}")
    r.assert_outcomes(passed=1, failed=1)
    records = _read_jsonl(out)  # only tests that passed every phase
    assert [r["test_id"] for r in records] == ["test_mem.py::test_alloc"] and records[0]["peak_gpu_mb"] >= 64.0
    assert "GPU Memory Profile Report" in r.stdout.str()


@pytest.mark.parametrize(
    "mode, expected, counts",
    [
        ("replace", {"a": 20.0, "stale": 5.0, "new[x=1]": 9.0}, "2 collected, 1 updated, 1 new, 0 removed, 4 total"),
        ("overwrite", {"a": 20.0, "new[x=1]": 9.0}, "2 collected, 1 updated, 1 new, 1 removed, 3 total"),
        ("fill", {"a": 10.0, "stale": 5.0, "new[x=1]": 9.0}, "2 collected, 0 updated, 1 new, 0 removed, 4 total"),
    ],
)
def test_gpu_mem_refresh_merge_modes(suite, monkeypatch, tmp_path, mode, expected, counts):
    """The refresh merges the output file's records into the shards. The records are written beforehand (the inner
    tests lie outside the tests root, so they add none, with or without a GPU)."""
    p = suite("gpu_mem")
    p.makepyfile(test_mem="def test_x(): pass")
    monkeypatch.setenv("TK_TESTS_DIR", str(tmp_path / "elsewhere"))
    profiles = tmp_path / "profiles"
    monkeypatch.setenv("TK_GPU_MEM_PROFILES_DIR", str(profiles))
    monkeypatch.setenv("TK_TEST_MERGE_MODE", mode)
    other = {"test_id": "moe/test_y.py::test_b", "peak_gpu_mb": 1.0}
    _write_jsonl(profiles / "moe" / "test_y.jsonl", [other])
    _write_jsonl(
        profiles / "quant" / "test_x.jsonl",
        [{"test_id": "quant/test_x.py::a", "peak_gpu_mb": 10.0}, {"test_id": "quant/test_x.py::stale", "peak_gpu_mb": 5.0}],
    )
    out = tmp_path / "mem.jsonl"
    _write_jsonl(
        out,
        [
            {"test_id": "quant/test_x.py::a", "peak_gpu_mb": 20.0},
            {"test_id": "quant/test_x.py::new[x=1]", "peak_gpu_mb": 9.0},
            {"test_id": "quant/test_x.py::new[x=1]", "peak_gpu_mb": 3.0},
        ],
    )
    with out.open("a") as f:
        f.write('{"test_id": "cut off by a crash\n')  # skipped, not fatal
    r = p.runpytest("--refresh-mem", f"--gpu-mem-output={out}", "--gpu-mem-flush-interval=0")
    assert r.ret == 0
    rows = _read_jsonl(profiles / "quant" / "test_x.jsonl")
    assert {r["test_id"].split("::")[1]: r["peak_gpu_mb"] for r in rows} == expected
    assert [r["test_id"] for r in rows] == sorted(r["test_id"] for r in rows) and list(rows[0]) == ["test_id", "peak_gpu_mb"]
    assert _read_jsonl(profiles / "moe" / "test_y.jsonl") == [other]
    text = r.stdout.str()
    assert f"Mode: {mode}, {counts} profiles" in text
    total = counts.split(", ")[-1].split()[0]
    assert f"Stage 1 (parallel): {total} test(s) <= 15000 MB; Stage 2 (isolated): 0 test(s) > 15000 MB" in text


def test_gpu_mem_refresh_fill_deselects_profiled_tests_and_usage_errors(suite, monkeypatch, tmp_path):
    p = suite("gpu_mem")
    p.makepyfile(test_mem=MEM_SUITE)
    r = p.runpytest("--refresh-mem")
    assert r.ret == pytest.ExitCode.USAGE_ERROR and "TK_GPU_MEM_PROFILES_DIR" in r.stderr.str()
    profiles = tmp_path / "profiles"
    monkeypatch.setenv("TK_GPU_MEM_PROFILES_DIR", str(profiles))
    _write_jsonl(profiles / "test_mem.jsonl", [{"test_id": "test_mem.py::test_big", "peak_gpu_mb": 1.0}])
    monkeypatch.setenv("TK_TEST_MERGE_MODE", "fill")
    r = p.runpytest("--refresh-mem", "--collect-only", "-q")
    assert "3/4 tests collected (1 deselected)" in r.stdout.str()
    assert "_TK_GPU_MEM_OUTPUT" not in os.environ  # the temporary output is released with the session
    monkeypatch.setenv("TK_TEST_MERGE_MODE", "nope")
    assert p.runpytest("--refresh-mem").ret == pytest.ExitCode.USAGE_ERROR


# --- random ---------------------------------------------------------------------------------------------------------


def test_seed_fixture_seeds_random_and_torch_from_the_node_id(suite, tmp_path):
    p = suite("random")
    out = tmp_path / "seeds.jsonl"
    p.makepyfile(
        test_seed=f"""
        import json, random
        import pytest
        import torch

        @pytest.mark.parametrize("i", [0, 1])
        def test_draw(request, seed, i):
            with open({str(out)!r}, "a") as f:
                f.write(json.dumps({{"nodeid": request.node.nodeid, "seed": seed, "py": random.random(),
                                     "torch": torch.randn(3).tolist()}}) + "\\n")
    """
    )
    p.runpytest().assert_outcomes(passed=2)
    p.runpytest("--seed", "5").assert_outcomes(passed=2)
    rows = _read_jsonl(out)
    for row, base in zip(rows, (0, 0, 5, 5)):
        want = base + int(hashlib.sha256(row["nodeid"].encode()).hexdigest(), 16) % 2**31
        assert row["seed"] == want
        import random

        assert row["py"] == random.Random(want).random()
        assert row["torch"] == torch.randn(3, generator=torch.Generator().manual_seed(want)).tolist()
    assert rows[0]["seed"] != rows[1]["seed"]


# --- tilelang_warning -----------------------------------------------------------------------------------------------


def test_tilelang_warnings_are_summarized(suite):
    p = suite("tilelang_warning")
    p.makepyfile(
        test_warn="""
        import sys

        def test_noisy():
            for stamp in ("10:41:51,361", "10:41:52,002"):
                print(f"2026-07-17 {stamp}  [TileLang:tilelang.cache:WARNING] (f.py:1): cache miss")
            print("[11:10:57] : Warning: Casting in BufferStore may lose precision", file=sys.stderr)

        def test_quiet():
            print("nothing to see")
    """
    )
    r = p.runpytest()
    r.assert_outcomes(passed=2)
    text = r.stdout.str()
    assert "TileLang warnings summary" in text and "2 TileLang warning(s) across 1 test(s)" in text
    assert "test_warn.py::test_noisy" in text and "test_quiet" not in text.split("TileLang warnings summary")[1]
    p.makepyfile(test_warn="def test_quiet(): print('ok')")
    assert "TileLang warnings summary" not in p.runpytest().stdout.str()  # and nothing left from the run before


# --- precompile -----------------------------------------------------------------------------------------------------

PRECOMPILE_SUITE = """
    import pytest

    @pytest.mark.parametrize("params", [{"num_tokens": 128}, {"hidden": 1}])
    def test_flat(params):
        pass

    @pytest.mark.parametrize("cfg", [[({"num_send_tokens": 4},)], ({"num_expanded_tokens": 8},)])
    def test_nested(cfg):
        pass

    def test_plain():
        pass
"""


def test_precompile_pass_keeps_the_peers_selection(suite, monkeypatch):
    p = suite("precompile")
    p.makepyfile(test_pre=PRECOMPILE_SUITE)
    r = p.runpytest()
    r.assert_outcomes(passed=5)
    assert "precompile pass" not in r.stdout.str()
    monkeypatch.setenv("TK_PRECOMPILE", "1")
    r = p.runpytest("-v")
    r.assert_outcomes(passed=3, deselected=2)
    ran = {line.split("::")[1].split()[0] for line in r.stdout.lines if "PASSED" in line and "::" in line}
    assert ran == {"test_flat[params0]", "test_nested[cfg0]", "test_nested[cfg1]"}
    text = r.stdout.str()
    assert "KernelKiln precompile pass (TK_PRECOMPILE=1)" in text
    if not HAS_GPU:
        assert "no CUDA device: nothing preloaded" in text


@pytest.mark.gpu
def test_precompile_pass_preloads_the_prebuilt_kernels(suite, monkeypatch):
    p = suite("precompile")
    p.makepyfile(test_pre=PRECOMPILE_SUITE)
    monkeypatch.setenv("TK_PRECOMPILE", "1")
    r = p.runpytest()
    r.assert_outcomes(passed=3, deselected=2)
    line = next(ln for ln in r.stdout.lines if "prebuilt kernel" in ln)
    assert "loaded on this GPU" in line and int(line.split()[0]) > 0, line


# --- xdist_failfast -------------------------------------------------------------------------------------------------


def _report(nodeid, when, failed):
    return types.SimpleNamespace(nodeid=nodeid, when=when, failed=failed)


@pytest.fixture
def interrupts(monkeypatch):
    sent = []
    monkeypatch.setattr(xdist_failfast, "_interrupt_this_process", lambda: sent.append(time.monotonic()))
    return sent


def test_failfast_interrupts_after_the_first_failures_teardown(interrupts):
    c = xdist_failfast._FailFastController()
    c.pytest_runtest_logreport(_report("t::a", "call", False))
    c.pytest_runtest_logreport(_report("t::b", "call", True))
    c.pytest_runtest_logreport(_report("t::a", "teardown", False))  # another test's teardown: keep waiting
    assert interrupts == [] and c.first_failure.nodeid == "t::b"
    c.pytest_runtest_logreport(_report("t::b", "teardown", False))
    c.pytest_runtest_logreport(_report("t::c", "call", True))  # later failures: no second signal
    c.pytest_sessionfinish(None, 2)
    assert len(interrupts) == 1 and c.first_failure.nodeid == "t::b"


def test_failfast_crash_interrupts_at_once_and_a_hung_teardown_after_the_grace(interrupts):
    c = xdist_failfast._FailFastController()
    c.pytest_runtest_logreport(_report("t::a", "???", True))  # a crashed worker's report
    assert len(interrupts) == 1
    c = xdist_failfast._FailFastController(grace_s=0.05)
    c.pytest_runtest_logreport(_report("t::a", "call", True))
    deadline = time.monotonic() + 5
    while len(interrupts) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(interrupts) == 2
    c = xdist_failfast._FailFastController(grace_s=0.1)  # the session ends first: the timer never fires
    c.pytest_runtest_logreport(_report("t::a", "call", True))
    c.pytest_sessionfinish(None, 1)
    time.sleep(0.2)
    assert len(interrupts) == 2


class _PluginManager:
    def __init__(self):
        self.plugins = {}

    def has_plugin(self, name):
        return name in self.plugins

    def register(self, plugin, name):
        self.plugins[name] = plugin


@pytest.mark.parametrize(
    "maxfail, numprocesses, worker, registered",
    [
        (1, 2, False, True),
        (1, "auto", False, True),
        (1, 2, True, False),
        (0, 2, False, False),
        (1, 0, False, False),
        (1, None, False, False),
    ],
)
def test_failfast_configure(maxfail, numprocesses, worker, registered):
    option = types.SimpleNamespace(maxfail=maxfail, numprocesses=numprocesses, maxworkerrestart=None)
    config = types.SimpleNamespace(option=option, pluginmanager=_PluginManager())
    if worker:
        config.workerinput = {}
    xdist_failfast.pytest_configure(config)
    xdist_failfast.pytest_configure(config)  # registered once
    assert list(config.pluginmanager.plugins) == (["tk_xdist_failfast"] if registered else [])
    assert option.maxworkerrestart == (0 if maxfail == 1 and numprocesses else None)


def test_failfast_without_xdist_does_nothing(suite):
    p = suite("xdist_failfast")
    p.makepyfile(test_ff="def test_a(): assert False\ndef test_b(): pass")
    r = p.runpytest("-x")
    assert r.ret == 1 and "First Failure Before Session Interrupt" not in r.stdout.str()


FAKE_XDIST = """
def pytest_addoption(parser):
    # stand-ins for the options of pytest-xdist that the plugin reads
    parser.addoption("--numprocesses", dest="numprocesses", default=None)
    parser.addoption("--maxworkerrestart", dest="maxworkerrestart", default=None)
"""


def test_failfast_interrupts_a_session(suite, monkeypatch):
    """In a real process: the first failure's teardown sends SIGINT, the session ends interrupted (exit code 2)
    before the next test, and the summary names the failure."""
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(Path(kernelkiln.__file__).parent.parent), os.environ.get("PYTHONPATH", "")])
    )
    p = suite("xdist_failfast", extra=FAKE_XDIST)
    p.makepyfile(
        test_ff="""
        def test_a():
            assert False

        def test_b():
            pass
    """
    )
    r = p.runpytest_subprocess("-x", "--numprocesses", "2", "-p", "no:cacheprovider")
    assert r.ret == pytest.ExitCode.INTERRUPTED, r.stdout.str()
    text = r.stdout.str()
    assert "First Failure Before Session Interrupt" in text and "test_ff.py::test_a" in text
    assert "KeyboardInterrupt" in text and r.parseoutcomes() == {"failed": 1}  # test_b never ran


def test_failfast_with_real_xdist(suite, monkeypatch):
    pytest.importorskip("xdist", reason="pytest-xdist is not installed here (not a dependency of this project)")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(Path(kernelkiln.__file__).parent.parent), os.environ.get("PYTHONPATH", "")])
    )
    p = suite("xdist_failfast")
    p.makepyfile(
        test_ff="""
        import time

        def test_a():
            assert False

        def test_slow():
            time.sleep(30)
    """
    )
    t = time.monotonic()
    r = p.runpytest_subprocess("-p", "xdist", "-n", "2", "-x")
    assert r.ret == pytest.ExitCode.INTERRUPTED and "First Failure Before Session Interrupt" in r.stdout.str()
    assert time.monotonic() - t < 25
