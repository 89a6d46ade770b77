"""Build manifests/ci-subset.toml for sm_90a and sm_100a: lower, nvcc, cuobjdump checks, index."""
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # build_tools
needs_toolchain = pytest.mark.skipif(importlib.util.find_spec("tilelang") is None,
                                     reason="tilelang (build toolchain) is not installed: pip install -r "
                                            "requirements/build.txt")


@needs_toolchain
def test_subset_builds_for_both_arches(subset_store):
    index = json.loads((subset_store / "index.json").read_text())
    assert index["arches"] == ["sm_100a", "sm_90a"]
    per_arch = {a: [v for v in index["variants"] if v["arch"] == a] for a in index["arches"]}
    from build_tools import manifest
    expected = len(manifest.load(ROOT / "manifests" / "ci-subset.toml")[1])
    assert expected >= 18  # per_token_cast + topk_gate + one variant of every other family
    assert len(per_arch["sm_90a"]) == len(per_arch["sm_100a"]) == expected
    for v in index["variants"]:
        assert (subset_store / v["cubin"]).stat().st_size == v["bytes"]
        for res in v["resources"].values():  # resource checks hold on both arches (SM100: built, not run)
            assert res["stack_bytes"] == 0 and res["static_shared_bytes"] <= 232448


@needs_toolchain
def test_cubins_hold_no_build_paths(subset_store):
    for cubin in subset_store.glob("*.cubin"):
        data = cubin.read_bytes()
        for marker in (str(ROOT).encode(), b"site-packages", b"/tmp/"):
            assert marker not in data, f"{cubin.name} embeds {marker!r}"


@needs_toolchain
def test_launch_specs_are_in_device_order(subset_store):
    index = json.loads((subset_store / "index.json").read_text())
    ptc = next(v for v in index["variants"] if v["op"] == "per_token_cast")
    names = [p["name"] for p in ptc["spec"]["params"]]
    kernel = ptc["spec"]["kernels"][0]
    # TileLang puts pointers first (sorted) and drops unused parameters: never the PrimFunc order.
    assert [names[a["param"]] for a in kernel["args"][:3]] == ["out", "sf", "x"]
    assert kernel["grid"][:2] == ["num_row_blocks", "num_col_blocks"] and kernel["pdl"] is True


@needs_toolchain
def test_two_shards_and_merge_are_byte_identical_to_one_build(subset_store, tmp_path):
    """Reproducibility: other directories, no build cache, 2 shards + merge == one build, byte for byte; each shard
    lowers in 4 processes (two slices per arch) where the one build used one per arch."""
    env = dict(os.environ, KERNELKILN_BUILD_CACHE="off")
    shards = []
    for i in range(2):
        out = tmp_path / f"shard{i}" / "kernels"
        subprocess.run([sys.executable, "-m", "build_tools", "build", "--manifest", "manifests/ci-subset.toml",
                        "--out-dir", str(out), "--shard", f"{i}/2", "-j", "4"], cwd=ROOT, env=env, check=True)
        shards.append(out)
    a, b = (json.loads((d / "index.json").read_text())["variants"] for d in shards)
    assert a and b and not {v["cubin"] for v in a} & {v["cubin"] for v in b}, "shards must not overlap"
    merged = tmp_path / "merged"
    subprocess.run([sys.executable, "-m", "build_tools", "merge", "--out-dir", str(merged), *map(str, shards)],
                   cwd=ROOT, check=True)
    assert (merged / "index.json").read_bytes() == (subset_store / "index.json").read_bytes()
    for cubin in subset_store.glob("*.cubin"):
        assert (merged / cubin.name).read_bytes() == cubin.read_bytes(), cubin.name


@needs_toolchain
def test_merge_rejects_conflicting_shards(subset_store, tmp_path):
    from build_tools import package
    other = tmp_path / "other"
    shutil.copytree(subset_store, other)
    index = json.loads((other / "index.json").read_text())
    entry = index["variants"][0]
    (other / entry["cubin"]).write_bytes(b"different bytes")
    entry["sha256"] = hashlib.sha256(b"different bytes").hexdigest()
    (other / "index.json").write_text(json.dumps(index))
    with pytest.raises(package.PackageError, match="conflict"):
        package.merge([subset_store, other], tmp_path / "merged", log=lambda *a: None)


@needs_toolchain
def test_runtime_index_is_split_per_op_and_arch(subset_store):
    """The loader's first call parses runtime/<op>.<arch>.json only, never the whole index.json."""
    index = json.loads((subset_store / "index.json").read_text())
    summary = json.loads((subset_store / "runtime" / "summary.json").read_text())
    assert summary["arches"] == index["arches"] and summary["ops"] == sorted({v["op"] for v in index["variants"]})
    for v in index["variants"]:
        entries = json.loads((subset_store / "runtime" / f"{v['op']}.{v['arch']}.json").read_text())
        match = [e for e in entries if e["key"] == v["key"]]
        assert len(match) == 1 and match[0]["sha256"] == v["sha256"] and match[0]["spec"] == v["spec"]
    sys.path.insert(0, str(ROOT / "python"))
    from kernelkiln._runtime.artifacts import KernelStore
    s = KernelStore(subset_store)
    s._device_arch[0] = "sm_90a"  # no GPU here: pretend device 0 is an H100/H200
    entry = next(v for v in index["variants"] if v["op"] == "topk_gate" and v["arch"] == "sm_90a")
    names = list(entry["variant"])
    k = s.kernel("topk_gate", names, [entry["variant"][n] for n in names], 0)
    assert k.entry["sha256"] == entry["sha256"] and s._index is None  # index.json was never parsed
