"""``python -m kernelkiln info`` names the backends an installation contains (stand-in Ascend stores written here,
docs/ASCEND.md "Store format"), and importing kernelkiln opens no CANN runtime and imports no torch_npu."""
import io
import subprocess
import sys
from pathlib import Path

import acl_standin

from kernelkiln import __main__ as cli
from kernelkiln._runtime import ascend

PYTHON = Path(__file__).resolve().parents[2] / "python"


def _lines(tmp_path, monkeypatch, store):
    monkeypatch.setenv("KERNELKILN_ASCEND_KERNEL_DIR", str(store))
    return cli.ascend_lines(["sm_90a", "sm_100a"], tmp_path / "cuda")


def test_no_ascend_store(tmp_path, monkeypatch):
    (tmp_path / "none").mkdir()
    backends, status = _lines(tmp_path, monkeypatch, tmp_path / "none")
    assert backends == "backends: CUDA sm_90a, sm_100a; Ascend none"
    assert status == ("Ascend: lowered and loader-tested; compiled and run only where CANN and an Ascend 950 exist "
                      "(not run by this project)")


def test_a_built_ascend_store(tmp_path, monkeypatch):
    e, images = acl_standin.entry("topk_gate", {"num_experts": 256}, [], [], b"x")
    store = acl_standin.write_store(tmp_path / "built", [e], images)
    backends, _ = _lines(tmp_path, monkeypatch, store)
    assert backends == f"backends: CUDA sm_90a, sm_100a; Ascend dav-3510 (topk_gate; {store})"


def test_a_lowered_only_ascend_store(tmp_path, monkeypatch):
    store = acl_standin.write_store(tmp_path / "low", [], {}, status="not-compiled", reason="bisheng not found")
    backends, _ = _lines(tmp_path, monkeypatch, store)
    assert backends == f"backends: CUDA sm_90a, sm_100a; Ascend none (lowered, not compiled: bisheng not found; {store})"


def test_info_prints_the_backends(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELKILN_ASCEND_KERNEL_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELKILN_KERNEL_DIR", str(tmp_path / "no-cuda-store"))
    from kernelkiln._runtime import artifacts
    monkeypatch.setattr(artifacts, "_store", None)
    out = io.StringIO()
    assert cli.info(out) == 1  # no CUDA kernels in this stand-in installation
    text = out.getvalue()
    assert "backends: CUDA none; Ascend none" in text and "Ascend: lowered and loader-tested" in text


def test_the_ascend_store_is_searched_in_the_documented_order(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELKILN_ASCEND_KERNEL_DIR", raising=False)
    dirs = ascend._default_directories(tmp_path / "kernels")
    assert dirs[-1] == tmp_path / "kernels" / "ascend"  # after an installed kernelkiln_ascend, if any
    monkeypatch.setenv("KERNELKILN_ASCEND_KERNEL_DIR", str(tmp_path / "mine"))
    assert ascend._default_directories(tmp_path / "kernels") == [tmp_path / "mine"]


def test_importing_kernelkiln_needs_neither_cann_nor_torch_npu():
    code = ("import sys; sys.path.insert(0, %r); import kernelkiln, kernelkiln.quant, kernelkiln.moe, kernelkiln.config; "
            "from kernelkiln._runtime import acl; maps = open('/proc/self/maps').read(); "
            "print('torch_npu' in sys.modules, acl._acl is None, 'libascendcl' in maps)" % str(PYTHON))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True", "False"]
