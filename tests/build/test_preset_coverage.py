"""index.json records which model presets a kernel store covers; `kernelkiln info` prints it."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from build_tools import manifest, package  # noqa: E402


def test_preset_coverage_counts_missing_variants():
    _, variants = manifest.load(manifest.preset_paths()["deepseek-v3"])
    full = [{"key": v.key, "arch": a} for v in variants for a in ("sm_90a", "sm_100a")]
    cov = package.preset_coverage(full)
    assert cov["deepseek-v3"] == {"arches": ["sm_100a", "sm_90a"], "missing": 0}
    cov = package.preset_coverage(full[2:])  # one variant dropped on both arches
    assert cov["deepseek-v3"]["missing"] == 2
    assert set(cov) == set(manifest.preset_paths())
