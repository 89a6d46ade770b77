"""build_tools/cross_wheel.py: an aarch64 manylinux wheel from an x86_64 one (shim cross-compiled)."""
import base64
import hashlib
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(importlib.util.find_spec("ziglang") is None or
                                importlib.util.find_spec("auditwheel") is None,
                                reason="ziglang and auditwheel are needed: pip install -r requirements/test.txt")


def _fake_x86_wheel(folder):
    """The shape of a real kernelkiln wheel: Python code, a cubin, the x86_64 shim, WHEEL and RECORD."""
    shim = folder / "shim.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(shim), str(ROOT / "csrc" / "launch_shim.c")], check=True)
    files = {"kernelkiln/__init__.py": b"", "kernelkiln/_kernels/k.sm_90a.cubin": b"\x7fELF-cubin-bytes",
             "kernelkiln/_runtime/libkernelkiln_launch.so": shim.read_bytes(),
             "kernelkiln-0.1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"}
    whl = folder / "kernelkiln-0.1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for folder_entry in ("kernelkiln/", "kernelkiln/_kernels/"):  # auditwheel repair writes directory entries
            z.writestr(folder_entry, b"")
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("kernelkiln-0.1.0.dist-info/RECORD", "")
    return whl


def test_aarch64_manylinux_wheel(tmp_path):
    src = _fake_x86_wheel(tmp_path)
    out = subprocess.run([sys.executable, "-m", "build_tools.cross_wheel", str(src), "--out", str(tmp_path / "out"),
                          "--manylinux", "2_28"], cwd=ROOT, capture_output=True, text=True, check=True)
    whl = Path(out.stdout.strip().splitlines()[-1])
    assert whl.name == "kernelkiln-0.1.0-py3-none-manylinux_2_28_aarch64.whl"
    with zipfile.ZipFile(whl) as z:
        shim = z.read("kernelkiln/_runtime/libkernelkiln_launch.so")
        assert int.from_bytes(shim[18:20], "little") == 183  # EM_AARCH64
        assert z.read("kernelkiln/_kernels/k.sm_90a.cubin") == b"\x7fELF-cubin-bytes"  # cubins unchanged
        assert "Tag: py3-none-manylinux_2_28_aarch64" in z.read("kernelkiln-0.1.0.dist-info/WHEEL").decode()
        for line in z.read("kernelkiln-0.1.0.dist-info/RECORD").decode().split():
            name, digest, size = line.rsplit(",", 2)
            if digest:  # every file's hash and size match, so pip accepts the wheel
                data = z.read(name)
                assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert int(size) == len(data)
