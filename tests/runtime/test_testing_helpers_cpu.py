"""kernelkiln.testing.{generator,bench,moe} and kernelkiln.config against the peer's tile_kernels 2.1.0 files, run
side by side on the CPU: the same results for the same inputs, environment variables and seeds (parameter lists,
test ids, generated tensors bit for bit).

The peer's testing/*.py files are loaded by path from its wheel under a stand-in ``tile_kernels`` package: its own
utils.py, rand/ and torch/topk.py (pure torch off Ascend) beside a stand-in ``tile_kernels.config`` that puts tensors
on the CPU and reports a 132-SM device. Our ``kernelkiln.config.get_device`` / ``get_device_num_sms`` are pointed at
the same answers for each test. The peer's config.py itself (it imports tilelang) is compared on this GPU-less
machine as it is.
"""
import importlib.util
import inspect
import os
import random
import sys
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelkiln import config
from kernelkiln.testing import bench, generator, moe

DEVICE_SMS = 132


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def peer(peer_wheel):
    """The peer's testing modules ``generator``, ``bench`` and ``moe`` (a namespace), loaded by path under stand-in
    packages that are removed again afterwards (whatever ``tile_kernels*`` modules were there before come back)."""
    root = peer_wheel("2.1.0") / "tile_kernels"
    stub_config = types.ModuleType("tile_kernels.config")
    stub_config.is_ascend = lambda: False
    stub_config.get_device = lambda: "cpu"
    stub_config.get_device_num_sms = lambda: DEVICE_SMS
    stub_config.get_num_vec_cores = lambda: 2 * DEVICE_SMS
    stub_config.get_max_ub_per_vector_core = lambda use_simt=True: (216 if use_simt else 248) * 1024
    names = ("tile_kernels", "tile_kernels.config", "tile_kernels.utils", "tile_kernels.rand",
             "tile_kernels.rand.seed", "tile_kernels.rand.randn_kernel", "tile_kernels.torch",
             "tile_kernels.torch.topk")
    saved = {k: sys.modules.get(k) for k in names}
    try:
        pkg = types.ModuleType("tile_kernels")
        pkg.__path__ = []
        sys.modules.update({"tile_kernels": pkg, "tile_kernels.config": stub_config})
        sys.modules["tile_kernels.utils"] = _load(root / "utils.py", "tile_kernels.utils")
        rand = types.ModuleType("tile_kernels.rand")
        rand.__path__ = []
        sys.modules["tile_kernels.rand"] = rand
        sys.modules["tile_kernels.rand.seed"] = _load(root / "rand" / "seed.py", "tile_kernels.rand.seed")
        kernel = sys.modules["tile_kernels.rand.randn_kernel"] = _load(root / "rand" / "randn_kernel.py",
                                                                       "tile_kernels.rand.randn_kernel")
        rand.randn, rand.randn_like = kernel.randn, kernel.randn_like
        tk_torch = types.ModuleType("tile_kernels.torch")
        tk_torch.__path__ = []
        sys.modules["tile_kernels.torch"] = tk_torch
        sys.modules["tile_kernels.torch.topk"] = _load(root / "torch" / "topk.py", "tile_kernels.torch.topk")
        mods = {n: _load(root / "testing" / f"{n}.py", f"peer_testing_{n}") for n in ("generator", "bench", "moe")}
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return types.SimpleNamespace(**mods)


@pytest.fixture(autouse=True)
def cpu_device(monkeypatch):
    """Our config answers as the peer's stand-in does; TK_* variables unset unless a test sets them."""
    monkeypatch.setattr(config, "get_device", lambda: "cpu")
    monkeypatch.setattr(config, "get_device_num_sms", lambda device=None: DEVICE_SMS)
    for var in ("TK_PRECOMPILE", "TK_TEST_LEVEL"):
        monkeypatch.delenv(var, raising=False)


def _both(fn_name, module, peer, *args, **kwargs):
    """(ours, theirs) of one call, or the exception type each raised."""
    out = []
    for mod in (globals()[module], getattr(peer, module)):
        try:
            r = getattr(mod, fn_name)(*args, **kwargs)
            out.append(list(r) if inspect.isgenerator(r) else r)
        except Exception:  # noqa: BLE001 - the outcome compared
            out.append(Exception)
    return out


def _same_tensors(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same_tensors(x, y)
        return
    assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
    assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _seeded(fn, seed, *args):
    """fn(*args) from a fixed torch and Python seed, with the torch generator state after it (same draws)."""
    torch.manual_seed(seed)
    random.seed(seed)
    r = fn(*args)
    return r, torch.get_rng_state(), random.getstate()


def _compare_seeded(ours, theirs, seed, *args):
    a, ta, pa = _seeded(ours, seed, *args)
    b, tb, pb = _seeded(theirs, seed, *args)
    _same_tensors(a, b)
    assert torch.equal(ta, tb) and pa == pb, "a different number of random draws"
    return a


# ---------------------------------------------------------------- generator: environment
@pytest.mark.parametrize("value", [None, "0", "1", "2", "3", "-1", "x", " 2", ""])
def test_test_level(peer, monkeypatch, value):
    if value is not None:
        monkeypatch.setenv("TK_TEST_LEVEL", value)
    ours, theirs = _both("get_test_level", "generator", peer)
    assert ours == theirs and (ours is Exception) == (value not in (None, "0", "1", "2", " 2"))


@pytest.mark.parametrize("value", [None, "0", "1", "true", " 1", "2"])
def test_is_precompile(peer, monkeypatch, value):
    if value is not None:
        monkeypatch.setenv("TK_PRECOMPILE", value)
    ours, theirs = _both("is_precompile", "generator", peer)
    assert ours is theirs and ours == (value == "1")


# ---------------------------------------------------------------- generator: parameter lists
_dims = st.dictionaries(st.sampled_from(["a", "b", "num_tokens", "hidden", "fmt"]),
                        st.lists(st.one_of(st.integers(-3, 9), st.booleans(), st.none(), st.text(max_size=2)),
                                 min_size=1, max_size=5),
                        min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(level=st.integers(-1, 3), dims=_dims)
def test_generate_samples(peer, level, dims):
    ours = generator.generate_samples(level, **dims)
    assert inspect.isgenerator(ours)
    assert list(ours) == list(peer.generator.generate_samples(level, **dims))


def test_generate_samples_takes_iterables_once_and_degenerate_calls(peer):
    for level in (0, 1, 2):
        def dims():
            return dict(x=iter((1, 2, 3)), y=range(2), z="ab")
        assert list(generator.generate_samples(level, **dims())) == list(peer.generator.generate_samples(level,
                                                                                                      **dims()))
    # level 2 of nothing: one empty sample; one empty dimension at level 2: none
    assert list(generator.generate_samples(2)) == list(peer.generator.generate_samples(2)) == [{}]
    assert list(generator.generate_samples(2, a=[], b=[1])) == list(peer.generator.generate_samples(2, a=[], b=[1]))
    # lower levels: no dimensions, or an empty one beside others, is an error in both (ours: a ValueError)
    for dims in ({}, {"a": [], "b": [1, 2]}):
        for mod in (generator, peer.generator):
            with pytest.raises((ValueError, ZeroDivisionError)):
                list(mod.generate_samples(1, **dims))
        with pytest.raises(ValueError):
            list(generator.generate_samples(0, **dims))
    assert list(generator.generate_samples(1, a=[], b=[])) == list(peer.generator.generate_samples(1, a=[], b=[]))


@pytest.mark.parametrize("precompile", [False, True])
@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_generate_num_tokens(peer, monkeypatch, precompile, level):
    if precompile:
        monkeypatch.setenv("TK_PRECOMPILE", "1")
    for alignment in (1, 7, 64, 128, 256):
        for backward_only in (False, True):
            ours, theirs = _both("generate_num_tokens", "generator", peer, level, alignment, backward_only)
            assert ours == theirs and ours is not Exception, (alignment, backward_only)
    assert generator.generate_num_tokens(level) == peer.generator.generate_num_tokens(level)


def test_generate_hidden_sizes(peer):
    assert generator.generate_hidden_sizes() == peer.generator.generate_hidden_sizes()
    for a in (1, 3, 32, 64, 128, 256, 512, 1024, 7168, 10**5):
        assert generator.generate_hidden_sizes(a) == peer.generator.generate_hidden_sizes(align=a), a


@pytest.mark.parametrize("fmt", ["fp32", "bf16", "e4m3", "e2m1", "e5m6", "other"])
def test_generate_cast_config(peer, fmt):
    for level in (-1, 0, 1, 2):
        assert generator.generate_cast_config(level, fmt) == peer.generator.generate_cast_config(level, fmt)


def test_generate_num_sms(peer):
    for level in (-1, 0, 1, 2, 3):
        assert generator.generate_num_sms(level) == peer.generator.generate_num_sms(level)
    assert generator.generate_num_sms(2) == [1, DEVICE_SMS - 19, DEVICE_SMS]


def test_generate_moe_params(peer):
    for level in (-1, 0, 1, 2, 3):
        ours = generator.generate_moe_params(level)
        assert inspect.isgenerator(ours)
        assert list(ours) == list(peer.generator.generate_moe_params(level)), level
    assert len(list(generator.generate_moe_params(1))) > 0


# ---------------------------------------------------------------- generator: seeded tensors
# Small stand-ins for generate_moe_params' cases (4001 tokens over 8+ ranks is too big for a shared CPU)
MOE_CASES = [
    {"num_send_tokens": 0, "num_topk": 6, "num_experts": 4, "num_ep_ranks": 8},
    {"num_send_tokens": 1, "num_topk": 8, "num_experts": 32, "num_ep_ranks": 8},
    {"num_send_tokens": 37, "num_topk": 6, "num_experts": 4, "num_ep_ranks": 8},
    {"num_send_tokens": 50, "num_topk": 8, "num_experts": 4, "num_ep_ranks": 16},
    {"num_send_tokens": 64, "num_topk": 1, "num_experts": 1, "num_ep_ranks": 1},
    {"num_send_tokens": 41, "num_topk": 9, "num_experts": 9, "num_ep_ranks": 8},
]


@pytest.mark.parametrize("params", MOE_CASES, ids=bench.make_param_id)
def test_generate_topk_idx(peer, params):
    for seed in (0, 1, 12345):
        got = _compare_seeded(generator.generate_topk_idx, peer.generator.generate_topk_idx, seed, dict(params))
        assert got.dtype == torch.int64 and got.shape[1:] == (params["num_topk"],)


@pytest.mark.parametrize("alignment", [1, 16, 128, 256])
@pytest.mark.parametrize("params", MOE_CASES, ids=bench.make_param_id)
def test_generate_psum_layout(peer, params, alignment):
    params = dict(params, alignment=alignment)
    for seed in (0, 7):
        mask, ends = _compare_seeded(generator.generate_psum_layout, peer.generator.generate_psum_layout, seed,
                                     params)
        assert mask.dtype == torch.bool and ends.dtype == torch.int32 and mask.shape[0] % alignment == 0


@pytest.mark.parametrize("alignment", [1, 128, 256])
def test_generate_psum_layout_precompile(peer, monkeypatch, alignment):
    monkeypatch.setenv("TK_PRECOMPILE", "1")
    params = dict(MOE_CASES[2], alignment=alignment)
    _compare_seeded(generator.generate_psum_layout, peer.generator.generate_psum_layout, 3, params)


@pytest.mark.parametrize("shape", [(17, 33), (0,), (4096,), (3, 0, 5), (2, 3, 64)])
def test_generate_rand_float(peer, shape):
    for seed in range(6):
        got = _compare_seeded(generator.generate_rand_float, peer.generator.generate_rand_float, seed, shape)
        assert got.dtype == torch.float32 and got.shape == shape


def test_generate_rand_float_redraws_overflows(peer, monkeypatch):
    """At the top exponent samples of |z| >= 4 overflow to inf and are redrawn: the same redraws in both."""
    monkeypatch.setattr(random, "randint", lambda lo, hi: 126)
    shape, seed = (100_000,), 0
    torch.manual_seed(seed)
    assert (torch.randn(shape).abs() >= 4).any()  # the branch is taken
    got = _compare_seeded(generator.generate_rand_float, peer.generator.generate_rand_float, seed, shape)
    assert torch.isfinite(got).all() and got.abs().max() <= torch.finfo(torch.float32).max / 8


# ---------------------------------------------------------------- moe.construct_logits
def _logits_case(kind, num_tokens=300, experts=16, seqs=None):
    params = {"num_tokens": num_tokens, "num_padded_tokens": 5, "num_routed_experts": experts, "num_topk": 6}
    if seqs is not None:
        params["num_seqs"] = seqs
    rows = (seqs or 1) * (num_tokens + 5)
    g = torch.Generator().manual_seed(99)
    kwargs = {"bias": None, "image_token_mask": None}
    if kind in ("bias", "image"):
        kwargs["bias"] = torch.randn(experts, generator=g)
    if kind == "coarse":  # fp32 spacing 2**-7 at 1e5: ties at the top-k boundary, rows are redrawn
        kwargs["bias"] = torch.full((experts,), 1e5)
    if kind == "image":
        kwargs["image_token_mask"] = torch.rand(rows, generator=g) < 0.3
        kwargs["image_bias"] = torch.randn(experts, generator=g)
    return params, kwargs


@pytest.mark.parametrize("kind, seqs", [("none", None), ("bias", None), ("image", None), ("bias", 3),
                                        ("coarse", None)])
def test_construct_logits(peer, kind, seqs):
    params, kwargs = _logits_case(kind, seqs=seqs)
    for seed in (0, 5):
        got = _compare_seeded(moe.construct_logits, peer.moe.construct_logits, seed, params, kwargs)
        assert got.dtype == torch.float32 and got.shape == ((seqs or 1) * 305, 16)
    if kind == "coarse":  # the redraw branch was taken
        torch.manual_seed(5)
        assert not torch.equal(got, torch.randn(305, 16))


def test_construct_logits_gives_up_as_the_peer_does(peer):
    """Scores all within one fp32 step (bias 1e8): no draw is stable, both raise RuntimeError after 100 tries."""
    params, kwargs = _logits_case("none", num_tokens=3, experts=8)
    kwargs["bias"] = torch.full((8,), 1e8)
    for fn in (moe.construct_logits, peer.moe.construct_logits):
        torch.manual_seed(0)
        with pytest.raises(RuntimeError):
            fn(params, kwargs)


def test_construct_logits_needs_the_peers_keys(peer):
    params, kwargs = _logits_case("none")
    for missing in ("bias", "image_token_mask"):
        kw = {k: v for k, v in kwargs.items() if k != missing}
        for fn in (moe.construct_logits, peer.moe.construct_logits):
            with pytest.raises(KeyError):
                fn(params, kw)


# ---------------------------------------------------------------- bench
_values = st.one_of(st.integers(-10, 10**6), st.booleans(), st.none(), st.text("abc,=x1 ", max_size=6),
                    st.floats(allow_nan=False, width=32), st.sampled_from(["e4m3", "e2m1", "bf16"]))
_names = st.sampled_from(["num_tokens", "num_ep_ranks", "num_experts", "hidden", "use_tma_aligned_col_major_sf",
                          "use_packed_ue8m0", "use_e4m3_sf", "round_sf", "num_per_channels", "numel", "num_rows",
                          "head_dim", "nesterov", "fmt", "num_topk", "ep", "col", "x"])


@settings(max_examples=300, deadline=None)
@given(params=st.dictionaries(_names, _values, max_size=8), display=st.booleans())
def test_param_ids(peer, params, display):
    ours = bench.make_param_id(params, display)
    assert ours == peer.bench.make_param_id(params, display)
    assert bench.make_param_id(params) == peer.bench.make_param_id(params)
    assert bench.format_param_id(ours, display) == peer.bench.format_param_id(ours, display)
    assert bench.format_param_id(ours) == peer.bench.format_param_id(ours)
    assert bench.get_cast_params(params) == peer.bench.get_cast_params(params)
    assert list(bench.get_cast_params(params)) == list(peer.bench.get_cast_params(params))


@settings(max_examples=300, deadline=None)
@given(param_id=st.text("abcen_=,0123 TrueFals-", max_size=40), display=st.booleans())
def test_format_param_id_of_any_text(peer, param_id, display):
    assert bench.format_param_id(param_id, display) == peer.bench.format_param_id(param_id, display)


def test_param_id_examples(peer):
    p = {"num_tokens": 512, "num_ep_ranks": 8, "num_experts": 32, "use_packed_ue8m0": True, "fmt": "e4m3",
         "round_sf": None}
    assert bench.make_param_id(p) == "num_tokens=512,ep=8,experts=32,ue8m0=True,fmt=e4m3,"
    assert bench.make_param_id(p, display=True) == peer.bench.make_param_id(p, display=True)
    assert bench.format_param_id("16,store-LLaMA-2048,hidden=7168,,") == "16,store-LLaMA-2048,hidden=7168,"


def _noisy():
    print("py-out")
    sys.stderr.write("py-err\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(1, b"fd-out\n")
    os.write(2, b"fd-err\n")


_SUPPRESS_SCRIPT = r"""
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("b", sys.argv[1])
b = importlib.util.module_from_spec(spec)
spec.loader.exec_module(b)
before = (sys.stdout, sys.stderr)
with b.suppress_stdout_stderr() as s:
    assert isinstance(s, b.suppress_stdout_stderr)
    print("py-out")
    sys.stderr.write("py-err\n")
    sys.stdout.flush()
    os.write(1, b"fd-out\n")
    os.write(2, b"fd-err\n")
    os.system("echo child-out; echo child-err >&2")
assert (sys.stdout, sys.stderr) == before
print("after", flush=True)
os.write(2, b"after-err\n")
try:
    with b.suppress_stdout_stderr():
        raise KeyError("x")
except KeyError:
    pass
assert (sys.stdout, sys.stderr) == before
print("end")
"""


def test_suppress_stdout_stderr(peer_wheel):
    """In a fresh interpreter (stdout/stderr on fds 1 and 2, as outside pytest): Python, fd-level and child-process
    output inside the block is dropped, the streams come back after it, and an exception inside propagates."""
    import subprocess
    for path in (bench.__file__, peer_wheel("2.1.0") / "tile_kernels" / "testing" / "bench.py"):
        r = subprocess.run([sys.executable, "-c", _SUPPRESS_SCRIPT, str(path)], capture_output=True, text=True,
                           timeout=60)
        assert (r.returncode, r.stdout, r.stderr) == (0, "after\nend\n", "after-err\n"), path


def test_empty_suppress(peer, capfd):
    for mod in (bench, peer.bench):
        with mod.empty_suppress() as s:
            assert isinstance(s, mod.empty_suppress)
            _noisy()
        out, err = capfd.readouterr()
        assert out == "py-out\nfd-out\n" and err == "py-err\nfd-err\n"
        with pytest.raises(KeyError):
            with mod.empty_suppress():
                raise KeyError("x")


# ---------------------------------------------------------------- config on a machine without a GPU/NPU
@pytest.fixture
def peer_config(peer_wheel, monkeypatch):
    pytest.importorskip("tilelang", reason="the peer's config.py imports tilelang")
    monkeypatch.undo()  # our real config, not the CPU stand-in of cpu_device
    mod = _load(peer_wheel("2.1.0") / "tile_kernels" / "config.py", "peer_config")
    config.reset_runtime_config()
    yield mod
    config.reset_runtime_config()


def test_config_defaults_and_knobs(peer_config):
    pc = peer_config
    assert config.is_ascend() is pc.is_ascend() is False
    assert config.get_device() == pc.get_device() == "cuda"
    assert config.get_pdl() is pc.get_pdl() is False
    assert config.get_deterministic_algorithms() is pc.get_deterministic_algorithms() is False
    assert config.get_token_alignment() == pc.get_token_alignment() == 128
    for fmt in ("e4m3", "e2m1"):
        for e4m3_sf in (False, True):
            assert config.get_amax_clamp_for_quant(fmt, e4m3_sf) == pc.get_amax_clamp_for_quant(fmt, e4m3_sf)
    for mod in (config, pc):
        mod.set_pdl(True)
        mod.use_deterministic_algorithms(1)
        mod.set_token_alignment(64)
        mod.set_amax_clamp_for_quant("e4m3", True, 0.5)
        assert (mod.get_pdl(), mod.get_deterministic_algorithms(), mod.get_token_alignment(),
                mod.get_amax_clamp_for_quant("e4m3", True), mod.get_amax_clamp_for_quant("e4m3", False)) == \
            (True, True, 64, 0.5, 1e-4)
        with pytest.raises(ValueError):
            mod.set_amax_clamp_for_quant("e5m2", False, 1.0)
        with pytest.raises(ValueError):
            mod.get_amax_clamp_for_quant("fp8", False)
        mod.reset_runtime_config()
        assert (mod.get_pdl(), mod.get_deterministic_algorithms(), mod.get_token_alignment(),
                mod.get_amax_clamp_for_quant("e4m3", True)) == (False, False, 128, 448.0 * 2**-9)
    assert callable(config.is_ascend.cache_clear) and callable(config.get_device_num_sms.cache_clear)


def test_config_device_queries_without_a_gpu(peer_config, monkeypatch):
    """No GPU and no NPU: every device query fails in both (ours with the project's RuntimeError); with the device's
    SM count given, the SM knobs agree."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from kernelkiln._runtime.artifacts import UnsupportedDeviceError
    for name in ("get_device_num_sms", "get_num_sms", "get_num_ai_cores", "get_num_cube_cores", "get_num_vec_cores",
                 "get_max_smem_per_sm"):
        with pytest.raises(UnsupportedDeviceError):
            getattr(config, name)()
        with pytest.raises(Exception):
            getattr(peer_config, name)()
    with pytest.raises(UnsupportedDeviceError):
        config.set_num_sms(8)
    for mod in (config, peer_config):
        with pytest.raises((RuntimeError, AssertionError)):
            mod.get_max_ub_per_vector_core()
        with pytest.raises((RuntimeError, AssertionError)):
            mod.get_max_ub_per_vector_core(False)
        monkeypatch.setattr(mod, "get_device_num_sms", lambda *a: DEVICE_SMS)
        assert (mod.get_num_sms(), mod.get_num_ai_cores(), mod.get_num_cube_cores(), mod.get_num_vec_cores()) == \
            (DEVICE_SMS, DEVICE_SMS, DEVICE_SMS, 2 * DEVICE_SMS)
        mod.set_num_sms(100)
        assert (mod.get_num_sms(), mod.get_num_ai_cores(), mod.get_num_cube_cores(), mod.get_num_vec_cores()) == \
            (100, 100, 100, 200)
        for bad in (0, DEVICE_SMS + 1):
            with pytest.raises((ValueError, AssertionError)):
                mod.set_num_sms(bad)
        assert mod.get_num_sms() == 100
        mod.reset_runtime_config()
        assert mod.get_num_sms() == DEVICE_SMS


def test_config_ascend_queries(peer_config, monkeypatch):
    """On an Ascend machine (faked: /dev/davinci_manager and a torch.npu with a 24-cube-core device) the device is
    'npu', the SM count is the cube-core count and the vector cores' Unified Buffer is 216/248 KiB, as the peer's."""
    npu = types.SimpleNamespace(current_device=lambda: 0,
                                get_device_properties=lambda i: types.SimpleNamespace(cube_core_num=24))
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: p == "/dev/davinci_manager" or real_exists(p))
    for mod in (config, peer_config):
        for f in (mod.is_ascend, mod.get_device, mod.get_device_num_sms, mod.get_max_ub_per_vector_core):
            f.cache_clear()
    try:
        for mod in (config, peer_config):
            assert (mod.is_ascend(), mod.get_device(), mod.get_device_num_sms(), mod.get_num_vec_cores(),
                    mod.get_max_ub_per_vector_core(), mod.get_max_ub_per_vector_core(False)) == \
                (True, "npu", 24, 48, 216 * 1024, 248 * 1024)
    finally:
        monkeypatch.undo()
        for mod in (config, peer_config):
            for f in (mod.is_ascend, mod.get_device, mod.get_device_num_sms, mod.get_max_ub_per_vector_core):
                f.cache_clear()
    assert config.is_ascend() is False and config.get_device() == "cuda"
    with pytest.raises(RuntimeError, match="no Ascend device"):
        config.get_max_ub_per_vector_core()
