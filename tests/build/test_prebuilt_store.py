"""KERNELKILN_PREBUILT_STORE: the CMake build packages a store built beforehand (CI: shards + merge), verified
by `build_tools check-store`, with no lowering and no nvcc; the JIT build sources go into the wheel too."""
import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # build_tools

from build_tools import package  # noqa: E402

NINJA = shutil.which("ninja") or str(Path(sysconfig.get_path("scripts")) / "ninja")
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None or not Path(NINJA).exists(), reason="cmake/ninja")


def _fake_store(d, arches=("sm_90a", "sm_100a")):
    d.mkdir(parents=True)
    variants = []
    for a in arches:
        image = f"cubin for {a}".encode()
        (d / f"op-1.{a}.cubin").write_bytes(image)
        variants.append({"op": "op", "key": "op(x=1)", "variant": {"x": 1}, "arch": a, "cubin": f"op-1.{a}.cubin",
                         "bytes": len(image), "sha256": hashlib.sha256(image).hexdigest()})
    (d / "index.json").write_text(json.dumps({"format": 1, "arches": sorted(arches), "variants": variants}))
    return d


def test_check_store_accepts_a_good_store_and_rejects_damage(tmp_path):
    store = _fake_store(tmp_path / "s")
    assert len(package.check_store(store, ["sm_90a"])["variants"]) == 2
    with pytest.raises(package.PackageError, match="missing requested arches"):
        package.check_store(_fake_store(tmp_path / "only90", ("sm_90a",)), ["sm_90a", "sm_100a"])
    (store / "op-1.sm_90a.cubin").write_bytes(b"tampered")
    with pytest.raises(package.PackageError, match="do not match"):
        package.check_store(store)
    with pytest.raises(package.PackageError, match="no index.json"):
        package.check_store(tmp_path)


def _cmake(store, build, prefix=None):
    cfg = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={NINJA}",
                          f"-DKERNELKILN_PREBUILT_STORE={store}", f"-DPython_EXECUTABLE={sys.executable}"],
                         capture_output=True, text=True)
    if cfg.returncode or prefix is None:
        return cfg
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    return subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix)], capture_output=True, text=True)


@needs_cmake
def test_cmake_packages_the_prebuilt_store_without_compiling(tmp_path):
    store = _fake_store(tmp_path / "merged")
    r = _cmake(store, tmp_path / "build", tmp_path / "inst")
    assert r.returncode == 0, r.stdout + r.stderr
    kernels = tmp_path / "inst" / "kernelkiln" / "_kernels"
    assert (kernels / "index.json").read_bytes() == (store / "index.json").read_bytes()
    assert sorted(p.name for p in kernels.glob("*.cubin")) == ["op-1.sm_100a.cubin", "op-1.sm_90a.cubin"]
    assert not (tmp_path / "build" / "gen").exists() and not (tmp_path / "build" / "plan.cmake").exists()
    jit_src = tmp_path / "inst" / "kernelkiln" / "_jit_src"
    assert (jit_src / "build_tools" / "__main__.py").is_file() and (jit_src / "kernels" / "quant").is_dir()
    assert not [p for p in jit_src.rglob("*") if p.is_file() and p.suffix != ".py"], "Python files only"


@needs_cmake
def test_cmake_rejects_a_damaged_prebuilt_store(tmp_path):
    store = _fake_store(tmp_path / "merged")
    (store / "op-1.sm_100a.cubin").write_bytes(b"tampered")
    r = _cmake(store, tmp_path / "build")
    assert r.returncode != 0 and "contents do not match its index entry" in r.stdout + r.stderr
