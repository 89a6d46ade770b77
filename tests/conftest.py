"""Shared fixtures: GPU tests skip with a visible reason on machines without a CUDA device."""
import os
import sys
from pathlib import Path

import pytest
import torch

# Run against the source tree unless an installed kernelkiln is requested (the GPU script sets it).
if os.environ.get("KERNELKILN_TEST_INSTALLED") != "1":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

# Shared test helpers (tests/bitwise.py) import as top-level modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))

HAS_GPU = torch.cuda.is_available()
requires_gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU on this machine: GPU tests run on the H200 "
                                  "through scripts/gpu_verify.sh")


def _has_npu():
    """An Ascend NPU through torch_npu (which needs the CANN runtime); False wherever either is missing."""
    try:
        import torch_npu  # noqa: F401
        return bool(torch.npu.is_available())
    except Exception:
        return False


HAS_NPU = _has_npu()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU on this machine: run scripts/gpu_verify.sh "
                                                    "(H200) for the GPU tests"))
        if "npu" in item.keywords and not HAS_NPU:
            item.add_marker(pytest.mark.skip(reason="no Ascend NPU (torch_npu + CANN runtime) on this machine: the "
                                                    "NPU tests run in CI's ascend job (Ascend 950, CANN >= 9.2)"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and the compiled kernels")
    config.addinivalue_line("markers", "npu: needs an Ascend NPU (torch_npu, CANN) and the compiled Ascend kernels")


@pytest.fixture(autouse=True)
def _release_cached_gpu_memory(request):
    """The GPU run puts several pytest processes on one GPU; each one's caching allocator would keep its peak
    reservation, and the others then fail small allocations. A GPU test gives its cached blocks back when it ends."""
    yield
    if HAS_GPU and "gpu" in request.node.keywords:
        torch.cuda.empty_cache()


@pytest.fixture
def seed(request):
    """Fresh but reproducible random inputs per test (seed from the test id)."""
    import hashlib
    s = int(hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:8], 16)
    torch.manual_seed(s)
    return s


@pytest.fixture(scope="session")
def subset_store(tmp_path_factory):
    """The kernel store of manifests/ci-subset.toml for both arches, built once per test session (its gen dir, with
    sources and cubins, is beside it). Skips without the build toolchain."""
    import importlib.util
    import subprocess
    if importlib.util.find_spec("tilelang") is None:
        pytest.skip("tilelang (build toolchain) is not installed: pip install -r requirements/build.txt")
    root = Path(__file__).resolve().parent.parent
    out = tmp_path_factory.mktemp("store") / "kernels"
    subprocess.run([sys.executable, "-m", "build_tools", "build", "--manifest", "manifests/ci-subset.toml",
                    "--out-dir", str(out), "-j", "2"], cwd=root, check=True)
    return out


@pytest.fixture(scope="session")
def peer_wheel(tmp_path_factory):
    """``peer_wheel(version)``: the directory of the peer's (tile_kernels) wheel, unpacked from the registry into a
    test-only location and never installed (its package needs a GPU stack; tests load single reference files from it
    by path). Skips where the registry cannot be reached. The wheel asks for Python >= 3.12 in its metadata, so the
    download names that version."""
    import subprocess
    import zipfile
    cache = {}

    def get(version):
        if version not in cache:
            d = tmp_path_factory.mktemp(f"tile_kernels-{version}")
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                "--python-version", "3.12", "-d", str(d), f"tile-kernels=={version}"],
                               capture_output=True, text=True, timeout=300)
            wheels = list(d.glob("tile_kernels-*.whl"))
            if r.returncode or not wheels:
                pytest.skip(f"tile-kernels {version} could not be downloaded from the registry: {r.stderr[-300:]}")
            with zipfile.ZipFile(wheels[0]) as z:
                z.extractall(d / "site")
            cache[version] = d / "site"
        return cache[version]

    return get


@pytest.fixture(scope="session")
def peer_reference(peer_wheel):
    """``peer_reference(relpath, version="2.1.0")``: one of the peer's reference files (e.g. "torch/engram.py"),
    loaded by path from its unpacked wheel, never installed. Its only tile_kernels import is
    ``tile_kernels.config.is_ascend``, which a stand-in answers with False (the CUDA branches, the ones our kernels
    follow) while the file loads; the stand-in is removed afterwards."""
    import importlib.util
    import types
    cache = {}

    def load(relpath, version="2.1.0"):
        if (relpath, version) not in cache:
            path = peer_wheel(version) / "tile_kernels" / relpath
            saved = {k: sys.modules.get(k) for k in ("tile_kernels", "tile_kernels.config")}
            package, config = types.ModuleType("tile_kernels"), types.ModuleType("tile_kernels.config")
            config.is_ascend = lambda: False
            sys.modules.update({"tile_kernels": package, "tile_kernels.config": config})
            try:
                name = f"peer_{version.replace('.', '_')}_{relpath.replace('/', '_').removesuffix('.py')}"
                spec = importlib.util.spec_from_file_location(name, path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
            finally:
                for k, v in saved.items():
                    if v is None:
                        sys.modules.pop(k, None)
                    else:
                        sys.modules[k] = v
            cache[(relpath, version)] = mod
        return cache[(relpath, version)]

    return load
