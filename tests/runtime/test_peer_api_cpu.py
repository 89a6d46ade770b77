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


# The peer's pytest plugins (tile_kernels.testing.pytest: benchmark baselines, GPU memory profiles, seeding,
# xdist fail-fast), loaded by name through pytest_plugins, are not part of KernelKiln yet.
TESTING_NOT_YET = {"pytest"}


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


# References of families not built yet (Engram, mHC: their own issues)
REFERENCES_NOT_YET = ("engram", "mhc", "sinkhorn", "make_offsets", "expand_to_mhc")


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
