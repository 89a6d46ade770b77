"""scripts/split_tests.py: groups of about equal duration; files without a duration count as the median."""
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "split_tests.py"


def _module():
    spec = importlib.util.spec_from_file_location("split_tests", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_longest_first_onto_the_least_loaded_group():
    times = {"a.py": 100.0, "b.py": 60.0, "c.py": 50.0, "d.py": 10.0}
    groups = _module().split(2, ["a.py", "b.py", "c.py", "d.py", "new.py"], times)
    loads = sorted(load for load, _ in groups)
    assert loads == [125.0, 150.0]  # new.py counts as the median, 55 s: a+c | b+new+d
    assert sorted(f for _, fs in groups for f in fs) == ["a.py", "b.py", "c.py", "d.py", "new.py"]


def test_more_groups_than_files_leaves_none_empty():
    groups = _module().split(8, ["a.py", "b.py"], {})
    assert len(groups) == 2 and all(files for _, files in groups)


def test_durations_of_the_fullest_committed_run_cover_the_gpu_tests():
    times = _module().durations()
    assert times, "no committed GPU run with junit files under benchmarks/results/"
    assert all(f.startswith("tests/") and f.endswith(".py") for f in times)
