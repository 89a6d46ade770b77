"""Dry run of the side-by-side benchmark's cases (benchmarks/side_by_side/) on the CPU: every call a case makes
binds against the signature of the peer's function (tile_kernels 2.1.0, imported from its wheel) and of ours, with
inputs built on the CPU at reduced token counts. The GPU run (scripts/gpu_side_by_side.sh) then fails only on
what needs a GPU to find."""
import importlib
import inspect
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
side_by_side = importlib.import_module("side_by_side")


class _Binding:
    """Stands in for a package: ``m.quant.per_token_cast(...)`` binds the call to both real functions."""

    def __init__(self, peer, ours, path=(), calls=None):
        self._peer, self._ours, self._path, self.calls = peer, ours, path, calls if calls is not None else []

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Binding(self._peer, self._ours, self._path + (name,), self.calls)

    def __call__(self, *args, **kwargs):
        dotted = ".".join(self._path)
        for pkg in (self._peer, self._ours):
            obj = pkg
            for part in self._path:
                obj = getattr(obj, part, None)
                assert obj is not None, f"{pkg.__name__}.{dotted} does not exist"
            try:
                inspect.signature(obj).bind(*args, **kwargs)
            except TypeError as e:
                raise AssertionError(f"{pkg.__name__}.{dotted}: {e}") from None
        self.calls.append(dotted)
        return None


@pytest.fixture(scope="module")
def packages(peer_wheel):
    pytest.importorskip("tilelang", reason="the peer's package imports tilelang (pip install -r requirements/build.txt)")
    site = str(peer_wheel("2.1.0"))
    sys.path.insert(0, site)
    try:
        import kernelkiln
        import tile_kernels
        yield tile_kernels, kernelkiln
    finally:
        sys.path.remove(site)


@pytest.mark.parametrize("family", side_by_side.FAMILIES)
def test_cases_bind_to_both_packages(packages, family):
    cases = list(side_by_side.all_cases(quick=True, families=(family,)))
    assert cases, f"no side-by-side cases for {family}"
    keys = [(c.name, json.dumps(c.params, sort_keys=True)) for c in cases]
    assert len(set(keys)) == len(keys), "two cases with the same name and parameters"
    for case in cases:
        calls = case.build("cpu")
        for fn in {id(f): f for f in (calls.run, calls.compare_call())}.values():
            m = _Binding(*packages)
            fn(m)
            assert case.name in m.calls, f"{case.name}: its calls {m.calls} do not include the op it names"
