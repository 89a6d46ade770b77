"""Drop-in: the modules of the peer's API that KernelKiln implements in full have every public name of
tile_kernels 2.1.0 with the same parameters and defaults, and the pure-Python helpers give the same results.
The peer's package is imported from its wheel in a test-only location (it needs tilelang, which the build pins)."""
import importlib
import inspect
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest_plugins = ["pytester"]

FULL_MODULES = ["config", "utils", "transform", "rand", "testing", "testing.bench", "testing.generator",
                "testing.moe", "testing.numeric", "testing.quant"]


@pytest.fixture(scope="module")
def peer(peer_wheel):
    pytest.importorskip("tilelang", reason="the peer's package imports tilelang (pip install -r requirements/build.txt)")
    site = str(peer_wheel("2.1.0"))
    sys.path.insert(0, site)
    try:
        yield lambda name: importlib.import_module(f"tile_kernels.{name}")
    finally:
        sys.path.remove(site)


def _public(mod):
    """The module's own public names: its __all__, else what it or its submodules define (not imports from elsewhere)."""
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in dir(mod) if not n.startswith("_") and not inspect.ismodule(getattr(mod, n))
                 and getattr(getattr(mod, n), "__module__", mod.__name__).startswith(mod.__name__)]
    return {n: getattr(mod, n) for n in names}


def _params(f):
    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


def _compatible(want, got):
    """Every call valid for the peer's signature is valid for ours and means the same: the same parameters in the
    same order and kinds, the peer's defaults kept (ours may default a parameter the peer requires), and any extra
    parameters of ours trailing and optional."""
    if len(got) < len(want):
        return False
    for (wn, wk, wd), (gn, gk, gd) in zip(want, got):
        if wn != gn or wk != gk or (wd is not inspect.Parameter.empty and wd != gd):
            return False
    return all(d is not inspect.Parameter.empty for _, _, d in got[len(want):])


@pytest.mark.parametrize("name", FULL_MODULES)
def test_every_public_name_with_the_peers_signature(peer, name):
    theirs = _public(peer(name))
    ours = importlib.import_module(f"kernelkiln.{name}")
    assert theirs, name
    for n, f in theirs.items():
        assert hasattr(ours, n), f"kernelkiln.{name} lacks {n}"
        if callable(f) and not isinstance(f, type):
            want, got = _params(f), _params(getattr(ours, n))
            # e.g. config.get_device_num_sms(device=None): a trailing optional parameter keeps the peer's calls valid
            assert _compatible(want, got), f"kernelkiln.{name}.{n}{got} vs tile_kernels.{name}.{n}{want}"


# Every testing submodule of the peer's is here (testing.pytest too: the plugins, loaded by name).
TESTING_NOT_YET = set()


def test_testing_submodules(peer):
    """kernelkiln.testing has the peer's testing submodules; the ones its __init__ imports are attributes of the
    package as soon as it is imported (bench, numeric, generator, quant), as the peer's are."""
    import kernelkiln.testing as ours
    theirs = peer("testing")
    peer_init = inspect.getsourcefile(theirs)
    with open(peer_init) as f:
        eager = {n.strip() for line in f if line.startswith("from . import")
                 for n in line[len("from . import"):].split(",")}
    assert eager and all(inspect.ismodule(getattr(ours, n, None)) for n in eager), eager
    import pathlib
    submodules = {p.stem for p in pathlib.Path(peer_init).parent.iterdir()
                  if p.suffix == ".py" and not p.stem.startswith("_") or (p / "__init__.py").exists()}
    for n in sorted(submodules - TESTING_NOT_YET):
        importlib.import_module(f"kernelkiln.testing.{n}")


class _RecordingParser:
    """Stands in for pytest's parser: records what a plugin's pytest_addoption declares."""

    def __init__(self):
        self.options = {}

    def addoption(self, *names, **attrs):
        self.options[names] = {k: attrs.get(k) for k in ("action", "default", "type", "dest")}


# tile_kernels.testing.pytest: the plugins a user's root conftest names in pytest_plugins, and their helper module
PLUGIN_MODULES = ["common", "benchmark", "gpu_mem", "random", "tilelang_warning", "xdist_failfast", "precompile"]


@pytest.mark.parametrize("name", PLUGIN_MODULES)
def test_pytest_plugins_have_the_peers_names_hooks_and_options(peer, name):
    """Each plugin module has the peer's public names: the same hooks and fixtures with the same parameters (pluggy
    and pytest pass them by name), the same constants, and the same command-line options (names, action, default,
    type)."""
    theirs = peer(f"testing.pytest.{name}")
    ours = importlib.import_module(f"kernelkiln.testing.pytest.{name}")
    want = _public(theirs)
    assert want, name
    for n, f in want.items():
        assert hasattr(ours, n), f"kernelkiln.testing.pytest.{name} lacks {n}"
        if callable(f) and not isinstance(f, type):
            assert _params(f) == _params(getattr(ours, n)), f"{name}.{n}"
        elif not callable(f):
            assert getattr(ours, n) == f, f"{name}.{n}"
    if hasattr(theirs, "pytest_addoption"):
        want_options, got_options = _RecordingParser(), _RecordingParser()
        theirs.pytest_addoption(want_options)
        ours.pytest_addoption(got_options)
        assert got_options.options == want_options.options


@pytest.fixture(scope="module")
def peer_plugins(peer):
    """The peer's plugin modules, imported before any pytester run: pytester drops the modules a test imports, and
    torch's own libraries cannot be imported twice."""
    return {name: peer(f"testing.pytest.{name}") for name in PLUGIN_MODULES}


@pytest.fixture
def inner_suite(peer_plugins, pytester, monkeypatch):
    """A pytester suite that loads one package's plugin by name: ``load(package, plugin)`` writes its conftest."""
    for name in ("TK_TESTS_DIR", "TK_BENCHMARK_TESTS_DIR", "TK_BENCHMARK_BASELINES_DIR", "TK_BENCHMARK_FAIL_MODE",
                 "TK_TEST_MERGE_MODE", "TK_PRECOMPILE", "_TK_BENCHMARK_OUTPUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # entry-point plugins would re-import per run
    pytester.makeini("[pytest]\nfilterwarnings = ignore::pytest.PytestAssertRewriteWarning\n"
                     "addopts = -p no:unraisableexception -p no:cacheprovider\n")

    def load(package, plugin):
        pytester.makeconftest(f"pytest_plugins = ['{package}.testing.pytest.{plugin}']")
        return pytester

    return load


_BENCH_SUITE = """
    import os
    import pytest
    from kernelkiln.testing.bench import make_param_id

    @pytest.mark.benchmark
    @pytest.mark.parametrize("params", [{"num_tokens": 128, "hidden": 7168}, {"num_tokens": 4096, "hidden": 7168}],
                             ids=make_param_id)
    def test_cast(params, benchmark_record):
        scale = float(os.environ.get("INNER_SCALE", "1"))
        benchmark_record(kernel="cast", operation="fwd", params={**params, "derived": "é"},
                         time_us=params["num_tokens"] / 100 * scale + 0.00123, bandwidth_gbs=1234.56789,
                         extras={"speedup": 1.234567, "bandwidth_gbs": 1.0, "n": 3})

    @pytest.mark.benchmark
    def test_single(benchmark_record):
        benchmark_record(kernel="cast", operation="single", params={"z": 1, "a": 2}, time_us=10.0, extras={"x": 0.5})
"""


def test_benchmark_files_and_exit_codes_match_the_peers(inner_suite, monkeypatch, tmp_path):
    """The same suite under the peer's benchmark plugin and ours: the same JSONL output and baseline shards byte for
    byte, the same exit codes for missing baselines and for regressions."""
    import shutil
    runs = {}
    for package in ("tile_kernels", "kernelkiln"):
        p = inner_suite(package, "benchmark")
        p.makepyfile(test_bench=_BENCH_SUITE)
        d = tmp_path / package
        d.mkdir()
        monkeypatch.setenv("TK_TESTS_DIR", str(p.path))
        monkeypatch.setenv("TK_BENCHMARK_FAIL_MODE", "missing")
        monkeypatch.delenv("TK_BENCHMARK_BASELINES_DIR", raising=False)  # <tests>/benchmark_baselines: none yet
        missing = p.runpytest("--run-benchmark", f"--benchmark-output={d / 'first.jsonl'}").ret
        monkeypatch.delenv("TK_BENCHMARK_FAIL_MODE")
        monkeypatch.setenv("TK_BENCHMARK_BASELINES_DIR", str(d / "baselines"))
        refresh = p.runpytest("--run-benchmark", "--refresh-baseline", f"--benchmark-output={d / 'refresh.jsonl'}").ret
        # a fresh directory per run: the peer caches the baselines it read, per directory, for the process
        shutil.copytree(d / "baselines", d / "baselines2")
        monkeypatch.setenv("TK_BENCHMARK_BASELINES_DIR", str(d / "baselines2"))
        monkeypatch.setenv("INNER_SCALE", "2")
        regressed = p.runpytest("--run-benchmark", f"--benchmark-output={d / 'slow.jsonl'}").ret
        monkeypatch.delenv("INNER_SCALE")
        runs[package] = (int(missing), int(refresh), int(regressed), (d / "first.jsonl").read_bytes(),
                         (d / "baselines" / "test_bench.jsonl").read_bytes(), (d / "slow.jsonl").read_bytes())
    assert runs["kernelkiln"][:3] == runs["tile_kernels"][:3] == (1, 0, 1)
    assert runs["kernelkiln"] == runs["tile_kernels"]



def test_key_filter_expressions_select_as_the_peers(peer_plugins):
    """-K: the same node ids kept for the same expressions, the same expressions refused."""
    from kernelkiln.testing.pytest import benchmark as ours
    theirs = peer_plugins["benchmark"]
    ids = ["t.py::test_cast[num_tokens=128,]", "t.py::test_cast_bwd[x]", "t.py::test_norm[num_tokens=4096,]",
           "u.py::test_and", "u.py::test with space"]
    for expression in ("cast", "cast bwd", "cast and not bwd", "not cast or bwd", "norm or cast and bwd",
                       "not not norm", "'with space'", '"num_tokens=1\\d+,"', "'and'", "test_ and or"):
        try:
            want = [theirs._compile_key_filter(expression)(i) for i in ids]
        except ValueError:
            with pytest.raises(ValueError):
                ours._compile_key_filter(expression)
            continue
        assert [ours._compile_key_filter(expression)(i) for i in ids] == want, expression

# Stand-ins for the torch.cuda memory calls, so that both packages' gpu_mem plugins measure on a machine without a GPU:
# each test says its peak in $INNER_PEAK_MB.
_CUDA_MEMORY_STAND_IN = """
import os
import torch

_saved = {}
_STAND_INS = {
    "is_available": lambda: True,
    "empty_cache": lambda: None,
    "reset_peak_memory_stats": lambda: None,
    "memory_allocated": lambda: 1 << 20,
    "max_memory_allocated": lambda: (1 << 20) + int(float(os.environ.get("INNER_PEAK_MB", "0")) * (1 << 20)),
}


def pytest_configure(config):
    for name, stand_in in _STAND_INS.items():
        _saved[name] = getattr(torch.cuda, name)
        setattr(torch.cuda, name, stand_in)


def pytest_unconfigure(config):
    for name, original in _saved.items():
        setattr(torch.cuda, name, original)
"""

_MEM_SUITE = """
    import os
    import pytest

    @pytest.mark.parametrize("peak", [3.25, 20000.0, 7.0], ids=["n=1,num_sms=4,", "n=2,", "n=1,num_sms=8,"])
    def test_mem(peak):
        os.environ["INNER_PEAK_MB"] = str(peak)

    def test_fails():
        os.environ["INNER_PEAK_MB"] = "1"
        assert os.environ.get("INNER_FAIL") != "1"
"""


@pytest.mark.parametrize("mode", ["replace", "overwrite", "fill"])
def test_gpu_mem_files_match_the_peers(inner_suite, monkeypatch, tmp_path, mode):
    """The same suite under the peer's gpu_mem plugin and ours (torch.cuda's memory calls stood in): the same JSONL
    records, the same profile shards after a refresh in each merge mode, the same large_gpu_mem selection."""
    runs = {}
    monkeypatch.setenv("TK_TEST_MERGE_MODE", mode)
    for package in ("tile_kernels", "kernelkiln"):
        p = inner_suite(package, "gpu_mem")
        p.makeconftest(f"pytest_plugins = ['{package}.testing.pytest.gpu_mem']\n{_CUDA_MEMORY_STAND_IN}")
        p.makepyfile(test_m=_MEM_SUITE)
        d = tmp_path / package
        profiles = d / "profiles"
        profiles.mkdir(parents=True)
        (profiles / "test_m.jsonl").write_text('{"test_id": "test_m.py::test_mem[n=2]", "peak_gpu_mb": 1.0}\n'
                                               '{"test_id": "test_m.py::test_gone", "peak_gpu_mb": 5.0}\n')
        monkeypatch.setenv("TK_TESTS_DIR", str(p.path))
        monkeypatch.setenv("TK_GPU_MEM_PROFILES_DIR", str(profiles))
        refresh = p.runpytest("--refresh-mem", f"--gpu-mem-output={d / 'mem.jsonl'}")
        monkeypatch.setenv("INNER_FAIL", "1")
        failing = p.runpytest("--refresh-mem", f"--gpu-mem-output={d / 'mem2.jsonl'}")  # a failed run writes nothing
        monkeypatch.delenv("INNER_FAIL")
        small = p.runpytest("-m", "not large_gpu_mem", "-v")
        # (in fill mode the second run deselects every test, all profiled by then: no output file, exit code 5)
        mem2 = d / "mem2.jsonl"
        runs[package] = (int(refresh.ret), int(failing.ret), refresh.parseoutcomes(), (d / "mem.jsonl").read_bytes(),
                         mem2.read_bytes() if mem2.exists() else None, (profiles / "test_m.jsonl").read_bytes(),
                         sorted(line.split()[0] for line in small.stdout.lines if " PASSED" in line))
    assert runs["kernelkiln"] == runs["tile_kernels"]
    assert runs["kernelkiln"][0] == 0 and runs["kernelkiln"][1] == (5 if mode == "fill" else 1)
    small_tests = ["test_m.py::test_fails", "test_m.py::test_mem[n=1,num_sms=4,]", "test_m.py::test_mem[n=1,num_sms=8,]"]
    # n=2 measured 20000 MB: large, except in fill mode, which keeps its old 1 MB profile
    assert runs["kernelkiln"][6] == small_tests + (["test_m.py::test_mem[n=2,]"] if mode == "fill" else [])

def test_seed_and_precompile_plugins_match_the_peers(inner_suite, monkeypatch, tmp_path):
    """The seeds (and so the drawn numbers) of the peer's random plugin and ours, and the tests a TK_PRECOMPILE=1
    pass selects, are the same."""
    seeds, selected = {}, {}
    for package in ("tile_kernels", "kernelkiln"):
        out = tmp_path / f"{package}.txt"
        p = inner_suite(package, "random")
        p.makepyfile(test_seed=f"""
            import random
            import pytest
            import torch

            @pytest.mark.parametrize("i", [0, 1])
            def test_draw(seed, i):
                with open({str(out)!r}, "a") as f:
                    f.write(f"{{seed}} {{random.random()}} {{torch.randn(2).tolist()}}\\n")
        """)
        p.runpytest("--seed", "7").assert_outcomes(passed=2)
        seeds[package] = out.read_text()
        p = inner_suite(package, "precompile")
        p.makepyfile(test_seed="""
            import pytest

            @pytest.mark.parametrize("params", [{"num_tokens": 1}, {"hidden": 1}, [{"num_send_tokens": 2}]])
            def test_p(params):
                pass

            def test_plain():
                pass
        """)
        monkeypatch.setenv("TK_PRECOMPILE", "1")
        r = p.runpytest("-v")
        monkeypatch.delenv("TK_PRECOMPILE")
        selected[package] = sorted(line.split()[0] for line in r.stdout.lines if " PASSED" in line)
    assert seeds["kernelkiln"] == seeds["tile_kernels"] and seeds["kernelkiln"].count("\n") == 2
    assert selected["kernelkiln"] == selected["tile_kernels"] and len(selected["kernelkiln"]) == 2

@settings(max_examples=200, deadline=None)
@given(x=st.integers(-50, 10**6), y=st.integers(1, 4096))
def test_integer_helpers_agree(peer, x, y):
    from kernelkiln import utils
    theirs = peer("utils")
    assert utils.ceil_div(x, y) == theirs.ceil_div(x, y) and utils.align(x, y) == theirs.align(x, y)
    assert utils.is_power_of_two(x) == theirs.is_power_of_two(x)
    if x >= 1:
        assert utils.next_power_of_two(x) == theirs.next_power_of_two(x)


def test_dtype_names_agree(peer):
    from kernelkiln import utils
    theirs = peer("utils")
    for dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.int8):
        assert utils.dtype_to_str(dtype) == theirs.dtype_to_str(dtype)
        assert utils.str_to_dtype(theirs.dtype_to_str(dtype)) == dtype
    with pytest.raises(ValueError):
        utils.dtype_to_str(torch.float16)


def test_numeric_helpers_agree(peer):
    from kernelkiln.testing import numeric
    theirs = peer("testing.numeric")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 7, generator=g)
    y = x + torch.randn(300, 7, generator=g) * 1e-3
    assert float(numeric.calc_diff(x, y)) == float(theirs.calc_diff(x, y))
    assert numeric.calc_diff(torch.zeros(3), torch.zeros(3)) == theirs.calc_diff(torch.zeros(3), torch.zeros(3)) == 0
    assert numeric.count_bytes(x, (y, None), [x[:2]]) == theirs.count_bytes(x, (y, None), [x[:2]])
    numeric.assert_equal(x, x.clone())
    for ours_then_theirs in ((numeric.assert_equal, theirs.assert_equal), (numeric.check_bias, theirs.check_bias)):
        for f in ours_then_theirs:
            with pytest.raises(AssertionError):
                f(x, x + 1) if f.__name__ == "check_bias" else f(x, y)
    unbiased = (x * 8).round() / 8
    numeric.check_bias(unbiased, x)
    theirs.check_bias(unbiased, x)


@pytest.mark.parametrize("hidden, g", [(7168, 128), (7168, 32), (256, 64), (100, 32)])
def test_clear_unused_sf_agrees(peer, hidden, g):
    from kernelkiln.testing import quant
    theirs = peer("testing.quant")
    words = -(-(-(-hidden // g)) // 4)
    sf = torch.randint(-2**31, 2**31 - 1, (9, words), dtype=torch.int32)
    assert torch.equal(quant.clear_unused_sf(sf.clone(), hidden, g), theirs.clear_unused_sf(sf.clone(), hidden, g))
    cols = torch.randint(-2**31, 2**31 - 1, (words, 5), dtype=torch.int32)
    assert torch.equal(quant.clear_unused_sf_col_pack(cols.clone(), 4 * words * 32 - 40, 32),
                       theirs.clear_unused_sf_col_pack(cols.clone(), 4 * words * 32 - 40, 32))
    codes = torch.randint(-128, 127, (64,), dtype=torch.int8)
    for fmt, t in (("e4m3", codes.view(torch.float8_e4m3fn)), ("e2m1", codes),
                   ("bf16", torch.randn(64).to(torch.bfloat16))):
        assert torch.equal(quant.quant_level_rank(t, fmt), theirs.quant_level_rank(t, fmt))


# Top-level names of the peer's that are not here yet: the Engram and mHC families and the autograd layers
# (their own issues), the peer's own version fields (ours: __version__ and TILE_KERNELS_API) and its tilelang import.
NOT_YET = {"engram", "mhc", "modeling", "commit_id", "version", "version_tuple", "tilelang"}


def test_top_level_names(peer):
    import kernelkiln
    theirs = {n for n in dir(importlib.import_module("tile_kernels")) if not n.startswith("_")}
    missing = sorted(n for n in theirs - NOT_YET if not hasattr(kernelkiln, n))
    assert not missing, f"kernelkiln lacks the peer's top-level names {missing}"
    assert kernelkiln.TILE_KERNELS_API == "2.1"


REFERENCES_NOT_YET = ()  # every family is built


def test_references_have_the_peers_signatures(peer):
    """Every reference of tile_kernels.torch 2.1 that KernelKiln has takes the peer's parameters and defaults (ours
    may add trailing optional ones); the rest are the Engram and mHC references."""
    import kernelkiln.torch as ours
    theirs = peer("torch")
    names = [n for n in dir(theirs) if not n.startswith("_") and callable(getattr(theirs, n))
             and not inspect.isclass(getattr(theirs, n))]
    missing = [n for n in names if not hasattr(ours, n) and not any(k in n for k in REFERENCES_NOT_YET)]
    assert not missing, f"kernelkiln.torch lacks {missing}"
    for n in names:
        if hasattr(ours, n):
            want, got = _params(getattr(theirs, n)), _params(getattr(ours, n))
            assert _compatible(want, got), f"kernelkiln.torch.{n}{got} vs tile_kernels.torch.{n}{want}"
