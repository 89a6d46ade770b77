"""Every byte a kernel receives, compared with the golden record written before the runtime's redesign.

The recorder (recorder.py) runs the cases of cases.py on the CPU against a kernel store's launch specs, through the
native launch shim (and the ctypes path) into a stand-in driver. golden.json was recorded at 4f279e3, before the
redesign, from the default manifest's store (the package was still called tilekiln: records name kernels by their
symbols and tensors by the cases' argument names, so the rename changes nothing in them). The test builds the
variants the cases use (manifests/launch-record.toml, sm_90a only) with today's build, so it checks the build's
launch specs and the runtime's argument packing together. KERNELKILN_RECORD_STORE=<a store> uses that store instead.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GOLDEN = HERE / "golden.json"


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) on this machine to build the launch shim")
    so = tmp_path_factory.mktemp("shim") / "launch_shim.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(ROOT / "csrc" / "launch_shim.c")], check=True)
    return so


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = os.environ.get("KERNELKILN_RECORD_STORE")
    if path:
        return Path(path)
    import importlib.util
    if importlib.util.find_spec("tilelang") is None:
        pytest.skip("tilelang (build toolchain) is not installed: pip install -r requirements/build.txt")
    out = tmp_path_factory.mktemp("record-store") / "kernels"
    subprocess.run([sys.executable, "-m", "build_tools", "build", "--manifest", "manifests/launch-record.toml",
                    "--out-dir", str(out), "-j", "2"], cwd=ROOT, check=True)
    return out


def _record(store, shim_path, out):
    subprocess.run([sys.executable, str(HERE / "recorder.py"), "--store", str(store), "--shim", str(shim_path),
                    "--out", str(out), "--python", str(ROOT / "python")], check=True, cwd=ROOT)
    return json.loads(out.read_text())


def test_the_manifest_builds_what_the_golden_cases_launch(tmp_path):
    out = tmp_path / "manifest.toml"
    subprocess.run([sys.executable, str(HERE / "recorder.py"), "--manifest-from", str(GOLDEN), "--out", str(out)],
                   check=True, cwd=ROOT)
    assert out.read_text() == (ROOT / "manifests" / "launch-record.toml").read_text()


@pytest.mark.parametrize("launcher", ["shim", "ctypes"])
def test_launches_are_byte_identical_to_the_golden_record(store, shim, tmp_path, launcher):
    got = _record(store, shim if launcher == "shim" else "", tmp_path / "records.json")
    golden = json.loads(GOLDEN.read_text())
    assert set(got) == set(golden), "the recorder's cases differ from the golden file's: re-record only on purpose"
    errors = {name: r["error"] for name, r in got.items() if "error" in r}
    assert not errors, f"cases that raised: {errors}"
    missing = {name: r["missing"] for name, r in got.items() if "missing" in r}
    assert not missing, f"variants not in the store: {missing}"
    differ = [name for name in golden if got[name] != golden[name]]
    assert not differ, f"launches that differ from the golden record: {differ}"
    assert sum(len(launches) for r in golden.values() if isinstance(r, dict) for launches in r["calls"]) > 200
    assert len(golden["_loaded_kernels"]) > 80
