"""Build progress display and failure reporting (CPU; fake jobs, a fake ninja, a forced lowering failure)."""
import importlib.util
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # build_tools

from build_tools import progress  # noqa: E402


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_tty_redraws_one_line_with_count_eta_and_failures():
    clock, out = Clock(), Tty()
    p = progress.Progress(4, stream=out, clock=clock, interval=0)
    assert p.tty
    clock.t += 10
    p.advance("lower")
    p.advance("lower", cached=True)
    text = out.getvalue()
    assert "\n" not in text and text.startswith("\r") and "\x1b[K" in text  # one line, redrawn in place
    line = p.line()
    assert "lower 2/4" in line and "nvcc 0/4" in line and "25%" in line and "1 cached" in line
    assert "ETA 1m00s" in line  # 6 jobs left at 10 s per job that did work
    p.fail("lower", "op(a=1)", "sm_90a", {"a": 1}, "Traceback ...\nValueError: boom")
    assert "FAILED lower op(a=1) [sm_90a]\n" in out.getvalue() and "1 failed" in p.line()


def test_log_mode_prints_plain_lines_at_most_every_interval():
    clock, out = Clock(), io.StringIO()
    p = progress.Progress(100, stream=out, clock=clock, interval=10)
    assert not p.tty
    for _ in range(50):  # 50 jobs within 5 s: one line (the first)
        clock.t += 0.1
        p.advance("lower")
    clock.t += 10
    p.advance("lower")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in out.getvalue() and "lower 51/100" in lines[-1]


def test_summary_and_failure_report_name_the_variant_and_message():
    out = io.StringIO()
    p = progress.Progress(2, stream=out, clock=Clock(), interval=0)
    p.advance("lower")
    p.fail("lower", "per_token_cast(fmt=bogus)", "sm_100a", {"fmt": "bogus"}, "line 1\nKeyError: 'bogus'")
    p.advance("nvcc", cached=True, n=2)
    report = p.finish(nbytes=2_500_000)
    summary = out.getvalue().splitlines()[-1]
    assert "2 kernels" in summary and "2.50 MB" in summary and "1 failed" in summary
    assert "nvcc: 0 run, 2 from cache" in summary
    assert "FAILED lower per_token_cast(fmt=bogus) [sm_100a]" in report
    assert "params: fmt='bogus'" in report and "| KeyError: 'bogus'" in report


def test_follow_ninja_counts_edges_and_attributes_nvcc_errors():
    ninja_out = textwrap.dedent("""\
        [1/3] nvcc /g/a.sm_90a.cubin
        [2/3] nvcc /g/b.sm_90a.cubin
        FAILED: [code=2] /g/b.sm_90a.cubin
        /usr/bin/nvcc --cubin -o /g/b.sm_90a.cubin /g/b.sm_90a.cu
        /g/b.sm_90a.cu(12): error: identifier "oops" is undefined
        1 error detected in the compilation of "/g/b.sm_90a.cu".
        [3/3] nvcc /g/c.sm_90a.cubin
        ninja: build stopped: subcommand failed.
        """).splitlines(keepends=True)
    p = progress.Progress(3, stream=io.StringIO(), clock=Clock(), interval=0)
    jobs = {"b.sm_90a.cubin": ("op(k=2)", "sm_90a", {"k": 2})}
    failed = progress.follow_ninja(ninja_out, p, lambda out: jobs.get(Path(out).name, (out, "?", {})))
    assert failed == 1 and p.done["nvcc"] == 3
    (f,) = p.failures
    assert (f.step, f.key, f.arch, f.params) == ("nvcc", "op(k=2)", "sm_90a", {"k": 2})
    assert 'identifier "oops" is undefined' in f.message and "--cubin" not in f.message


def test_a_failing_variant_fails_the_build_with_its_spec_and_traceback(tmp_path):
    """Force a lowering failure (monkeypatched kernel build) through the real CLI: exit status, key, params,
    traceback. No tilelang needed: the patched build raises before any lowering."""
    m = tmp_path / "m.toml"
    m.write_text('[build]\narches = ["sm_90a"]\n[[topk_gate]]\nexperts_per_lane = [3]\nvector_loads = [false]\n')
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from build_tools import cache, manifest, __main__ as cli
        cache.cache_dir = lambda: None  # never a cache hit
        mod = manifest.kernel_module("topk_gate")
        def bogus_build(params, arch):
            raise ValueError("forced failure for experts_per_lane=%d" % params["experts_per_lane"])
        mod.build = bogus_build
        cli.main(["build", "--manifest", {str(m)!r}, "--out-dir", {str(tmp_path / "store")!r}])
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode != 0
    assert "FAILED lower topk_gate(experts_per_lane=3,vector_loads=0) [sm_90a]" in r.stderr
    assert "params: experts_per_lane=3, vector_loads=False" in r.stderr
    assert "ValueError: forced failure for experts_per_lane=3" in r.stderr and "Traceback" in r.stderr
    assert "build failed: 1 kernel job(s) failed" in r.stderr
    assert "1 failed" in r.stdout and not (tmp_path / "store").exists()



@pytest.mark.skipif(importlib.util.find_spec("tilelang") is None, reason="needs nvcc from the build toolchain")
def test_an_nvcc_error_fails_the_build_with_the_variant_and_compiler_stderr(tmp_path):
    """Real ninja + nvcc on a source that cannot compile (lowering monkeypatched to return it)."""
    m = tmp_path / "m.toml"
    m.write_text('[build]\narches = ["sm_90a"]\n[[topk_gate]]\nexperts_per_lane = [2]\nvector_loads = [false]\n')
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from build_tools import cache, lower, __main__ as cli
        cache.cache_dir = lambda: None
        lower.lower_variant = lambda v, arch, share_with=None: (
            "extern \\"C\\" __global__ void k() {{ undefined_thing(); }}\\n", {{}}, None)
        cli.main(["build", "--manifest", {str(m)!r}, "--out-dir", {str(tmp_path / "store")!r}])
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode != 0
    assert "FAILED nvcc topk_gate(experts_per_lane=2,vector_loads=0) [sm_90a]" in r.stderr, r.stderr
    assert "params: experts_per_lane=2, vector_loads=False" in r.stderr
    assert '"undefined_thing" is undefined' in r.stderr


def test_follow_ninja_keeps_ninja_errors_that_are_no_compile_failure():
    other = []
    p = progress.Progress(1, stream=io.StringIO(), clock=Clock(), interval=0)
    lines = ["ninja: Entering directory `g'\n", "ninja: error: 'x.cu', needed by 'x.cubin', missing\n"]
    assert progress.follow_ninja(lines, p, lambda out: (out, "?", {}), other=other) == 0
    assert other[-1] == "ninja: error: 'x.cu', needed by 'x.cubin', missing" and not p.failures


def test_follow_ninja_counts_every_variant_of_a_compile_unit():
    ninja_out = ["[1/2] nvcc /g/op-unit-aaa.sm_90a.cubin\n", "[2/2] nvcc /g/op-unit-bbb.sm_90a.cubin\n"]
    p = progress.Progress(5, stream=io.StringIO(), clock=Clock(), interval=0)
    jobs = {"op-unit-aaa.sm_90a.cubin": ("op-unit-aaa", "sm_90a", {}, 4),
            "op-unit-bbb.sm_90a.cubin": ("op-unit-bbb", "sm_90a", {}, 1)}
    assert progress.follow_ninja(ninja_out, p, lambda out: jobs[Path(out).name]) == 0
    assert p.done["nvcc"] == 5
