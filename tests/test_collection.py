"""A test directory that pytest does not collect is a set of tests that never runs: fail when that happens."""
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_directory_is_collected(request):
    args = [Path(a.split("::")[0]).resolve() for a in request.config.args]
    if args != [TESTS] or request.config.option.keyword or request.config.option.markexpr:
        import pytest
        pytest.skip("checked only when the whole tests/ directory is collected (the test command)")
    expected = {p.parent for p in TESTS.rglob("test_*.py")}
    collected = {Path(str(item.fspath)).parent for item in request.session.items}
    missing = sorted(str(d.relative_to(TESTS)) for d in expected - collected)
    assert not missing, f"test directories pytest did not collect: {missing} (check norecursedirs in pyproject.toml)"
