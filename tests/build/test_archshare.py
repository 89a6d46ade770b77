"""One lowering for both CUDA arches where it is provably the same (build_tools/archshare.py, archtrace.c,
docs/LOWERING.md §5): a shared lowering must be exactly what the other arch's own lowering gives, and a variant whose
lowering depends on the arch must be lowered for it.

The interposer is loaded with RTLD_GLOBAL before TileLang, so lowerings run in subprocesses of their own."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from build_tools import __main__ as cli  # noqa: E402
from build_tools import archshare, cache, progress  # noqa: E402

# first variants of the default manifest: get_fused_mapping's lowering is arch-independent; fused_weight's
# vectorizer picks 256-bit accesses on sm_100a (the planner's result differs); engram_sinkhorn_finalize's kernel
# module builds another PrimFunc for sm_100a (TileLang's packed fp32 reduction there)
SHARED, BY_PLANNER, BY_MODULE = "get_fused_mapping", "fused_weight", "engram_sinkhorn_finalize"

_LOWER = """
import json, sys, warnings
sys.path.insert(0, ".")
warnings.simplefilter("ignore")
from build_tools import archshare, lower, manifest
_, variants = manifest.load("manifests/default.toml")
first = {}
for v in variants:
    first.setdefault(v.op, v)
out = {}
for op in sys.argv[2:]:
    v = first[op]
    if sys.argv[1] == "share":
        src, launch, shared = lower.lower_variant(v, "sm_90a", "sm_100a")
        t = lower.lower_variant.last_trace
        out[op] = {"src": src, "launch": launch, "shared": shared, "reasons": t.reasons, "forks": t.forks,
                   "supported": archshare.supported()}
    else:
        src, launch, _ = lower.lower_variant(v, sys.argv[1])
        out[op] = {"src": src, "launch": launch}
print(json.dumps(out))
"""


def _lower(mode, *ops, **env):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_LOWER), mode, *ops], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, **env}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def lowered():
    pytest.importorskip("tilelang", reason="lowering needs TileLang (requirements/build.txt)")
    ops = (SHARED, BY_PLANNER, BY_MODULE)
    return _lower("share", *ops), _lower("sm_100a", *ops), _lower("sm_90a", *ops, KERNELKILN_ARCH_SHARE="off")


def test_a_shared_lowering_is_the_other_arch_lowering(lowered):
    share, own, plain = lowered
    r = share[SHARED]
    assert r["supported"] is None and r["reasons"] == [] and r["shared"] is not None
    assert r["src"] == own[SHARED]["src"]  # the CUDA sm_100a's own lowering gives
    assert r["shared"] == own[SHARED]["launch"]  # the launch spec too, arch included
    assert r["src"] == plain[SHARED]["src"] and r["launch"] == plain[SHARED]["launch"]  # sm_90a's is unchanged


def test_an_arch_dependent_lowering_is_not_shared(lowered):
    share, own, plain = lowered
    for op, why in ((BY_PLANNER, "VectorizePlanner"), (BY_MODULE, "builds another PrimFunc")):
        r = share[op]
        assert r["shared"] is None and any(why in reason for reason in r["reasons"]), r["reasons"]
        assert r["src"] != own[op]["src"]  # and rightly so: sm_100a's own lowering differs
        assert r["src"] == plain[op]["src"] and r["launch"] == plain[op]["launch"]  # tracing changed nothing
    assert share[BY_PLANNER]["forks"] >= 1  # the planner's other-arch result came from a child process


def test_off_switch_and_cache_key(monkeypatch):
    monkeypatch.setenv("KERNELKILN_ARCH_SHARE", "off")
    assert not archshare.enabled() and archshare.state() == "off"
    monkeypatch.setenv("KERNELKILN_ARCH_SHARE", "explain")  # shares, and says why not where it does not
    assert archshare.enabled() and archshare.explain() and archshare.state().startswith("archshare-")
    monkeypatch.delenv("KERNELKILN_ARCH_SHARE")
    assert archshare.enabled() and not archshare.explain() and archshare.state().startswith("archshare-")
    # every lowering is keyed on the sharing code: a change to it lowers everything again
    assert "build_tools/archtrace.c" in cache._SHARED_SOURCES and "build_tools/archshare.py" in cache._SHARED_SOURCES


def test_another_tilelang_release_lowers_every_arch(monkeypatch):
    pytest.importorskip("tilelang", reason="needs TileLang")
    monkeypatch.setattr(archshare, "AUDITED_TILELANG", "0.0.0")
    monkeypatch.setattr(archshare, "_lib", object())  # as if loaded; the version check comes first
    archshare._tilelang_check.cache_clear()
    try:
        assert "checked against 0.0.0 only" in archshare._tilelang_check()
    finally:
        archshare._tilelang_check.cache_clear()


def test_build_lowers_the_second_arch_only_where_not_shared(monkeypatch):
    calls = []

    def fake_slices(work, gen, prog, jobs=None, share_with=None, shareable=None, shared=None):
        calls.append(({a: list(vs) for a, vs in work.items()}, share_with, shareable))
        if share_with:
            shared.add(("b", share_with))
        return True

    class V:
        def __init__(self, key):
            self.key = key

    monkeypatch.setattr(cli, "_lower_slices", fake_slices)
    a, b, c = V("a"), V("b"), V("c")
    assert cli._lower_parallel({"sm_90a": [a, b], "sm_100a": [b, c]}, Path("."), None, 2)
    (first, share_with, shareable), (second, again, _) = calls
    assert first == {"sm_90a": [a, b]} and share_with == "sm_100a" and shareable == {"b", "c"}
    assert second == {"sm_100a": [c]} and again is None  # b was shared
    calls.clear()
    monkeypatch.setenv("KERNELKILN_ARCH_SHARE", "off")
    assert cli._lower_parallel({"sm_90a": [a], "sm_100a": [b]}, Path("."), None, 2)
    assert calls == [({"sm_90a": [a], "sm_100a": [b]}, None, None)]


def test_progress_counts_shared_lowerings_apart(capsys):
    p = progress.Progress(3, tty=False, steps=("lower",))
    p.advance("lower")
    p.advance("lower", shared=True)
    p.advance("lower", cached=True)
    p.finish()
    assert "lower: 1 run, 1 shared between arches, 1 from cache" in capsys.readouterr().out
