"""What a snippet of op calls hands the driver, on the CPU: shared by the ops' launch-argument tests.

``capture(script_body, store, tmp_path_factory)`` runs ``script_body`` in a fresh interpreter with the launch
recorder's stand-ins installed (fake CUDA tensors, the recording driver, the real launch shim built here) and the
kernel store ``store``; the body fills a dict ``out`` (e.g. with ``recorder._canonical(rec.launches, ...)``), which
comes back decoded from JSON. Skips without a C compiler (the shim needs one).
"""
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_PRELUDE = r"""
import json, os, sys
sys.path.insert(0, {python!r}); sys.path.insert(0, {recorder!r})
import recorder
recorder._install_fake_cuda()
os.environ["KERNELKILN_KERNEL_DIR"] = {store!r}
rec = recorder.Recorder()
recorder._install_driver(rec, {shim!r})
import torch, kernelkiln
out = {{}}
"""


def capture(script_body, store, tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) on this machine to build the launch shim")
    so = tmp_path_factory.mktemp("shim") / "shim.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(ROOT / "csrc" / "launch_shim.c")], check=True)
    code = _PRELUDE.format(python=str(ROOT / "python"), recorder=str(ROOT / "tests" / "launch_record"),
                           store=str(store), shim=str(so)) + script_body + "\nprint(json.dumps(out))\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def arg_values(launch, kind):
    """The decoded scalar launch arguments of one ctype ("int32", "int64", "float32"), in order."""
    fmt = {"int32": "<i", "int64": "<q", "float32": "<f"}[kind]
    return [struct.unpack(fmt, bytes.fromhex(a[kind]))[0] for a in launch["args"] if kind in a]


def pointers(launch):
    """The labelled pointer arguments of one launch ("name+offset")."""
    return [a["ptr"] for a in launch["args"] if "ptr" in a]
