"""Shared build fixtures: one build of manifests/ci-subset.toml per test session."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def subset_store(tmp_path_factory):
    """The kernel store of ci-subset for both arches (its gen dir, with sources and cubins, is beside it)."""
    out = tmp_path_factory.mktemp("store") / "kernels"
    subprocess.run([sys.executable, "-m", "build_tools", "build", "--manifest", "manifests/ci-subset.toml",
                    "--out-dir", str(out), "-j", "2"], cwd=ROOT, check=True)
    return out
