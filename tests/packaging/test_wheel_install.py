"""The wheel (ci-subset manifest) installs into a fresh venv without tilelang or nvcc and lists its kernels.

Slow (builds a wheel and a venv): runs when KERNELKILN_WHEEL_TEST=1 (nox -s tests sets it).
"""
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # build_tools, for the manifest's variant count
pytestmark = [
    pytest.mark.skipif(os.environ.get("KERNELKILN_WHEEL_TEST") != "1",
                       reason="wheel build + fresh venv is slow: set KERNELKILN_WHEEL_TEST=1 (nox -s tests does)"),
    pytest.mark.skipif(importlib.util.find_spec("tilelang") is None, reason="tilelang not installed"),
]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, KERNELKILN_MANIFEST="manifests/ci-subset.toml")
    subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-w", str(out)],
                   cwd=ROOT, env=env, check=True)
    (whl,) = out.glob("kernelkiln-*.whl")
    return whl


def test_wheel_contents_and_tag(wheel):
    assert wheel.name.endswith("-py3-none-linux_x86_64.whl") or "-py3-none-manylinux" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    cubins = [n for n in names if n.endswith(".cubin")]
    assert any(n.endswith(".sm_90a.cubin") for n in cubins) and any(n.endswith(".sm_100a.cubin") for n in cubins)
    assert "kernelkiln/_kernels/index.json" in names
    assert not [n for n in names if n.startswith(("kernels/", "build_tools/"))], "build-time code leaked into wheel"


def test_fresh_venv_without_toolchain_imports_and_lists(wheel, tmp_path):
    venv = tmp_path / "venv"
    # The venv sees this interpreter's torch (system site) but gets only the wheel from us.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([sys.executable, "-c", "import torch, os; print(os.path.dirname(os.path.dirname("
                           "torch.__file__)))"], capture_output=True, text=True, check=True).stdout.strip()
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
                    str(wheel)], check=True)
    code = ("import sys, importlib.util; sys.path[:0] = [%r]; sys.path.append(%r); "
            "assert importlib.util.find_spec('tilelang') is None and importlib.util.find_spec('tvm') is None; "
            "import shutil; assert shutil.which('nvcc') is None; "
            "import kernelkiln, kernelkiln.__main__; kernelkiln.__main__.info(); "
            "ks = kernelkiln.list_kernels(); print(len(ks), sorted({k[1] for k in ks}))"
            ) % (str(target), _torch_only_path(site, tmp_path))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    from build_tools import manifest
    arches, variants = manifest.load(ROOT / "manifests" / "ci-subset.toml")
    assert last.split()[0] == str(len(variants) * len(arches)) and "sm_90a" in last and "sm_100a" in last, out.stdout
    assert "built with: tilelang 0.1.15" in out.stdout and "per_token_cast" in out.stdout


def _torch_only_path(site, tmp_path):
    """A directory exposing torch and its pure dependencies but not tilelang/tvm/nvidia toolchains."""
    keep = tmp_path / "torch-only"
    keep.mkdir()
    for entry in Path(site).iterdir():
        if entry.name.split("-")[0].split(".")[0].lower() in ("tilelang", "tvm", "tvm_ffi", "apache_tvm_ffi"):
            continue
        if entry.name == "nvidia":
            continue
        (keep / entry.name).symlink_to(entry)
    return str(keep)
