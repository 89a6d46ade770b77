"""How `build` shares its lowering processes out over the arches (build_tools/__main__.py `_lowering_slices`)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # build_tools

from build_tools import __main__ as cli  # noqa: E402


def _slices(monkeypatch, work, jobs, cached=()):
    monkeypatch.setattr(cli, "_lowered_in_cache", lambda v, a: (v, a) in cached)
    return cli._lowering_slices(work, jobs)


def test_one_arch_gets_every_process(monkeypatch):
    work = {"sm_90a": list(range(10))}
    slices = _slices(monkeypatch, work, 2)
    assert [a for a, _ in slices] == ["sm_90a", "sm_90a"]
    assert sorted(v for _, vs in slices for v in vs) == list(range(10))  # every variant once
    assert [len(vs) for _, vs in slices] == [5, 5]


def test_processes_follow_the_uncached_work(monkeypatch):
    work = {"sm_90a": list(range(12)), "sm_100a": list(range(100, 104))}
    slices = _slices(monkeypatch, work, 4)
    per_arch = {a: sum(1 for b, _ in slices if b == a) for a in work}
    assert per_arch == {"sm_90a": 3, "sm_100a": 1}
    # cached variants count for nothing: with sm_90a all cached, the processes go to sm_100a
    cached = {(v, "sm_90a") for v in work["sm_90a"]}
    slices = _slices(monkeypatch, work, 4, cached)
    per_arch = {a: sum(1 for b, _ in slices if b == a) for a in work}
    assert per_arch == {"sm_90a": 1, "sm_100a": 3}
    assert sorted(v for a, vs in slices if a == "sm_90a" for v in vs) == work["sm_90a"]  # still written out


def test_never_fewer_processes_than_arches_nor_more_than_variants(monkeypatch):
    work = {"sm_90a": [1], "sm_100a": [2]}
    assert len(_slices(monkeypatch, work, 1)) == 2
    assert len(_slices(monkeypatch, work, 8)) == 2
    assert _slices(monkeypatch, {"sm_90a": []}, 4) == []
