"""Opt-in JIT fallback (python/kernelkiln/_jit.py): off by default, lock + atomic publish, clear errors,
and one real build of a per_token_cast variant through the AOT pipeline when tilelang is installed."""
import hashlib
import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelkiln import _jit as jit
from kernelkiln._runtime import artifacts, launcher

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # build_tools, kernels
from build_tools import manifest  # noqa: E402  (light: kernel modules import tilelang lazily)

OP = "per_token_cast"
_VALUE = {"in_dtype": "bfloat16", "in_sf_kind": "none", "fmt": "e4m3", "num_per_channels": 128, "sf_kind": "fp32",
          "precomputed": False, "rows": 4}
NAMES = tuple(manifest.param_names(OP))  # the op's current compile-time parameters (its contract)
VALUES = tuple(_VALUE.get(n, False) for n in NAMES)  # parameters added later: their off value


def _fake_runner(delay=0.0, counter=None, fail=False):
    """Stands in for the build subprocess: writes a one-variant store like `build_tools build` does."""
    def run(src, manifest, out_dir, gen_dir, arch):
        if counter is not None:
            with open(counter, "a") as f:
                f.write("built\n")
        time.sleep(delay)
        if fail:
            return SimpleNamespace(returncode=1, stdout="", stderr="FAILED lower per_token_cast(...)\nboom")
        spec = tomllib.loads(Path(manifest).read_text())
        (table,) = spec[OP]
        image = b"fake cubin " + arch.encode()
        out_dir.mkdir(parents=True)
        (out_dir / "k.cubin").write_bytes(image)
        entry = {"op": OP, "arch": arch, "key": "k", "cubin": "k.cubin", "bytes": len(image),
                 "sha256": hashlib.sha256(image).hexdigest(), "variant": {n: v[0] for n, v in table.items()},
                 "spec": {"params": [], "kernels": []}}
        (out_dir / "index.json").write_text(json.dumps({"format": 1, "arches": [arch], "variants": [entry]}))
        return SimpleNamespace(returncode=0, stdout="", stderr="")
    return run


@pytest.fixture
def toolchain_ok(monkeypatch):
    monkeypatch.setattr(jit, "toolchain_problem", lambda: None)


def _empty_store(tmp_path):
    d = tmp_path / "store"
    d.mkdir()
    (d / "index.json").write_text(json.dumps({"format": 1, "arches": ["sm_90a"], "variants": []}))
    s = artifacts.KernelStore(d)
    s._device_arch[0] = "sm_90a"  # no GPU here: the device's arch is what a lookup needs
    return s


def test_disabled_by_default_and_error_names_the_switch(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELKILN_JIT", raising=False)
    assert not jit.enabled()
    monkeypatch.setattr(jit, "build", lambda *a, **k: pytest.fail("JIT must not run unless KERNELKILN_JIT=1"))
    with pytest.raises(artifacts.MissingSpecializationError, match="KERNELKILN_JIT=1") as e:
        _empty_store(tmp_path).kernel(OP, NAMES, VALUES, 0)
    assert "pip wheel" in str(e.value)  # the AOT route is still offered first


def test_enabled_builds_the_missing_variant_and_loads_it_from_the_jit_store(tmp_path, monkeypatch, toolchain_ok):
    monkeypatch.setenv("KERNELKILN_JIT", "1")
    monkeypatch.setenv("KERNELKILN_JIT_CACHE", str(tmp_path / "jit"))
    monkeypatch.setattr(jit, "_run_build", _fake_runner())
    k = _empty_store(tmp_path).kernel(OP, NAMES, VALUES, 0)
    name = jit.variant_name(OP, "sm_90a", NAMES, VALUES)
    assert k.cubin_path == tmp_path / "jit" / name / "k.cubin"
    assert k._read_cubin() == b"fake cubin sm_90a"  # sha256-checked against the JIT store's index
    (tmp_path / "jit" / name / "k.cubin").write_bytes(b"tampered")
    with pytest.raises(launcher.LaunchError, match="does not match the index"):
        k._read_cubin()


def test_one_variant_manifest_expands_to_exactly_that_variant():
    text = jit.manifest_text(OP, "sm_100a", NAMES, VALUES)
    data = tomllib.loads(text)
    assert data["build"]["arches"] == ["sm_100a"]
    (v,) = manifest.expand(OP, data[OP])
    assert v.as_dict() == dict(zip(NAMES, VALUES))


def _build_in_child(root, counter):
    jit.toolchain_problem = lambda: None
    jit.build(OP, "sm_90a", NAMES, VALUES, root=Path(root), runner=_fake_runner(delay=0.5, counter=counter))


def test_many_processes_build_once_under_the_lock(tmp_path):
    root, counter = tmp_path / "jit", tmp_path / "count"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_build_in_child, args=(str(root), str(counter))) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0] * 4
    assert counter.read_text() == "built\n", "exactly one process compiled"
    entry, d = jit.lookup(OP, "sm_90a", NAMES, VALUES, root)
    assert (d / entry["cubin"]).read_bytes() == b"fake cubin sm_90a"
    assert not list(root.glob(".tmp-*")), "temp build dirs are removed"


def test_store_appears_atomically_and_a_failed_build_leaves_nothing(tmp_path, toolchain_ok):
    root = tmp_path / "jit"
    name = jit.variant_name(OP, "sm_90a", NAMES, VALUES)
    seen = []

    def runner(src, manifest, out_dir, gen_dir, arch):
        r = _fake_runner()(src, manifest, out_dir, gen_dir, arch)
        seen.append((root / name).exists())  # complete in the temp dir, not yet visible
        return r
    jit.build(OP, "sm_90a", NAMES, VALUES, root=root, runner=runner)
    assert seen == [False] and (root / name / "index.json").is_file()

    with pytest.raises(jit.JitError, match="failed:\n.*FAILED lower per_token_cast"):
        jit.build(OP, "sm_100a", NAMES, VALUES, root=root, runner=_fake_runner(fail=True))
    assert not (root / jit.variant_name(OP, "sm_100a", NAMES, VALUES)).exists()
    assert not list(root.glob(".tmp-*"))


def test_unusable_cache_dir_gives_a_clear_message(tmp_path, toolchain_ok):
    (tmp_path / "file").write_text("")
    for root in (tmp_path / "file" / "jit",  # parent is a file: cannot be created
                 Path("/proc/kernelkiln-jit-test")):  # a read-only filesystem (even for root)
        with pytest.raises(jit.JitError, match="not usable.*KERNELKILN_JIT_CACHE to a writable directory"):
            jit.build(OP, "sm_90a", NAMES, VALUES, root=root, runner=_fake_runner())


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_cache_dir(tmp_path, toolchain_ok):
    root = tmp_path / "ro"
    root.mkdir(mode=0o555)
    with pytest.raises(jit.JitError, match="not usable"):
        jit.build(OP, "sm_90a", NAMES, VALUES, root=root, runner=_fake_runner())


def test_missing_toolchain_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tilelang" else object())
    with pytest.raises(jit.JitError, match="tilelang is not installed"):
        jit.build(OP, "sm_90a", NAMES, VALUES, root=tmp_path / "jit", runner=_fake_runner())


@pytest.mark.skipif(importlib.util.find_spec("tilelang") is None, reason="tilelang (build toolchain) not installed")
def test_end_to_end_jit_build_of_one_variant(tmp_path):
    """The real pipeline in a subprocess; the calling process never imports tilelang/tvm. Lowering and nvcc
    results come from the shared build cache when present (a cold build of one variant takes ~10-20 s)."""
    code = (f"import sys, json; from pathlib import Path; from kernelkiln import _jit as jit; "
            f"e, d = jit.build({OP!r}, 'sm_90a', {NAMES!r}, {VALUES!r}, root=Path({str(tmp_path / 'jit')!r})); "
            f"print(json.dumps([e, str(d)])); "
            f"print([m for m in sys.modules if m.split('.')[0] in ('tilelang', 'tvm', 'tvm_ffi')])")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    t0 = time.time()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    entry_json, modules = r.stdout.strip().splitlines()[-2:]
    entry, d = json.loads(entry_json)
    assert modules == "[]"
    image = (Path(d) / entry["cubin"]).read_bytes()
    assert hashlib.sha256(image).hexdigest() == entry["sha256"] and entry["variant"] == dict(zip(NAMES, VALUES))
    assert entry["spec"]["kernels"], "a launch spec like the shipped store's"
    assert time.time() - t0 < 120
