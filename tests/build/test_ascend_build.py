"""The Ascend build path on the CPU (docs/ASCEND.md): every Ascend variant of the default manifest lowered to AscendC,
sources against their launch specs, the one line and the empty Ascend store where there is no bisheng, the compile
step through a stand-in bisheng / ld.lld (its flags, the checks of its output, the store it fills), and shards +
merge against one build, byte for byte, with independent lowerings (no cache)."""
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
sys.path.insert(0, str(ROOT))

from build_tools import ascend, elf, manifest  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tilelang") is None,
                                reason="tilelang (build toolchain) is not installed: pip install -r requirements/build.txt")

TARGET = "dav-3510"
DEFAULT = ROOT / "manifests" / "default.toml"
SUBSET = ROOT / "manifests" / "ci-subset.toml"
_CANN_VARS = ("BISHENG_HOME", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")


def _env(**extra):
    """The environment of a build without any CANN toolkit (whatever the machine has), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _CANN_VARS}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and not os.path.exists(os.path.join(p, "bisheng")))
    env.update(extra)
    return env


def _build(manifest_path, out, env, *more):
    r = subprocess.run([sys.executable, "-m", "build_tools", "build", "--manifest", str(manifest_path), "--arches",
                        TARGET, "--out-dir", str(out), "-j", "2", *more], cwd=ROOT, env=env, capture_output=True,
                       text=True)
    return r


@pytest.fixture(scope="module")
def lowered(tmp_path_factory):
    """The default manifest's Ascend variants, lowered once into a fresh cache, built where there is no bisheng."""
    d = tmp_path_factory.mktemp("ascend")
    cache = d / "cache"
    r = _build(DEFAULT, d / "store", _env(KERNELKILN_BUILD_CACHE=str(cache)), "--gen-dir", str(d / "gen"))
    assert r.returncode == 0, r.stdout + r.stderr
    return {"store": d / "store", "gen": d / "gen", "cache": cache, "stdout": r.stdout, "stderr": r.stderr}


def _default_variants():
    targets, variants = ascend.load(DEFAULT)
    assert targets == [TARGET]
    return variants


def test_default_manifest_names_the_ascend_target_for_both_ops():
    variants = _default_variants()
    assert {v.op for v in variants} == {"per_token_cast", "topk_gate"} == set(ascend.ops_with_kernels())
    casts = {(v.as_dict()["fmt"], v.as_dict()["num_per_channels"], v.as_dict()["sf_kind"]) for v in variants
             if v.op == "per_token_cast"}
    assert casts == {("e4m3", 128, "fp32"), ("e4m3", 128, "ue8m0"), ("e2m1", 32, "fp32"), ("e2m1", 32, "ue8m0")}
    assert ascend.load(SUBSET)[0] == [TARGET]
    subset_keys = {v.key for v in ascend.load(SUBSET)[1]}
    assert subset_keys and subset_keys <= {v.key for v in variants}


def test_manifest_errors_name_the_problem(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_text('[build]\narches = ["sm_90a"]\nascend = ["dav-9999"]\n')
    with pytest.raises(manifest.ManifestError, match="unsupported Ascend targets"):
        ascend.load(bad)
    bad.write_text('[build]\narches = ["sm_90a"]\n[[ascend.topk_gate]]\nnum_vregs = [1]\n')
    with pytest.raises(manifest.ManifestError, match="need"):
        ascend.load(bad)
    bad.write_text('[build]\nascend = ["dav-3510"]\n[[ascend.cast]]\nin_dtype = ["float32"]\n')
    with pytest.raises(manifest.ManifestError, match="has no Ascend kernel"):
        ascend.load(bad)
    bad.write_text('[build]\nascend = ["dav-3510"]\n[[ascend.topk_gate]]\nnum_vregs = [9]\n')
    with pytest.raises(manifest.ManifestError, match="num_vregs must be one of"):
        ascend.load(bad)
    assert manifest.load(DEFAULT)[0] == ["sm_90a", "sm_100a"]  # the CUDA loader skips the Ascend tables


def test_without_bisheng_one_line_and_no_ascend_binaries(lowered):
    output = (lowered["stdout"] + lowered["stderr"]).splitlines()
    lines = [ln for ln in output if ln.startswith("ascend") or "bisheng" in ln or "CANN" in ln]
    assert len(lines) == 1 and lines[0].startswith("ascend: bisheng not found"), lines
    assert f"{len(_default_variants())} Ascend kernels lowered" in lines[0]
    folder = lowered["store"] / "ascend"
    assert not list(lowered["store"].rglob("*.aibin")) and not list(lowered["store"].rglob("*.asc"))
    assert sorted(p.name for p in (folder / "runtime").iterdir()) == ["summary.json"]
    summary = json.loads((folder / "runtime" / "summary.json").read_text())
    assert summary["status"] == "not-compiled" and summary["arches"] == [] and summary["ops"] == []
    index = json.loads((folder / "index.json").read_text())
    assert index["variants"] == [] and len(index["lowered"]) == len(_default_variants())
    assert subprocess.run([sys.executable, "-m", "build_tools", "check-store", "--store", str(lowered["store"])],
                          cwd=ROOT, capture_output=True).returncode == 0


def test_every_source_agrees_with_its_launch_spec(lowered):
    gen = lowered["gen"]
    index = json.loads((lowered["store"] / "ascend" / "index.json").read_text())
    by_key = {e["key"]: e for e in index["lowered"]}
    for v in _default_variants():
        source = (gen / f"{v.stem}.{TARGET}.asc").read_text()
        launch = json.loads((gen / f"{v.stem}.{TARGET}.json").read_text())
        assert by_key[v.key]["source_sha256"] == hashlib.sha256(source.encode()).hexdigest()
        assert launch["key"] == v.key and launch["arch"] == TARGET and launch["backend"] == "ascend"
        assert tuple(p["name"] for p in launch["params"]) == ascend.contract(v.op).args_for({})
        (k,) = launch["kernels"]
        assert k["symbol"].endswith("_" + v.stem.rsplit("-", 1)[1])
        assert source.count(f'extern "C" __global__ __vector__ void {k["symbol"]}(') == 1
        got = ascend.entry_signature(source, k["symbol"])
        want = ascend.expected_signature(k, launch["params"])
        assert [t for t, _ in got] == [t for t, _ in want], v.key
        assert [n for _, n in got if n is not None] and all(w is None or w == g for (_, g), (_, w) in zip(got, want))
        # every buffer and scalar the entry takes is one of the spec's parameters, each passed once
        params = [a["param"] for a in k["args"]]
        assert len(params) == len(set(params))
        assert {launch["params"][i]["kind"] for i in params} <= {"buffer", "scalar", "symbol"}
        # the host argument buffer: in order, aligned, sized
        end = 0
        for a in k["args"]:
            assert a["offset"] >= end and a["offset"] % max(a["size"], 4) == 0
            assert a["size"] == (8 if a["kind"] == "ptr" else ascend.ARG_BYTES[a["ctype"]])
            end = a["offset"] + a["size"]
        assert k["args_bytes"] == -(-end // 8) * 8
        assert k["block_dim"] == "num_cores" and k["core_type"] == "vector"
        assert 0 < k["dyn_ubuf_bytes"] <= ascend.UB_BYTES[TARGET]
        names = {p["name"] for p in launch["params"]}
        assert eval(k["work_items"], {"__builtins__": {}}, {n: 1000 for n in names}) > 0  # an expression of them


def test_sources_use_the_integer_encoders_and_exact_division(lowered):
    """No float->fp8/fp4 conversion instruction (its saturation/NaN rules are not the references'); the plain fp32
    scales use the correctly rounded division."""
    for v in _default_variants():
        source = (lowered["gen"] / f"{v.stem}.{TARGET}.asc").read_text()
        assert "float8" not in source and "fp8" not in source.lower() and "float4" not in source
        divisions = source.count("simd_inst::vdiv")
        if v.op == "per_token_cast" and v.as_dict()["sf_kind"] == "fp32":  # sf = amax / max, sf_inv = max / amax
            assert divisions == source.count("simd_inst::vdiv_0ulp_ftz_true(") == 2, v.key
        else:
            assert divisions == 0, v.key


# ---------------------------------------------------------------------------------------- the compile step

_FAKE_BISHENG = r'''#!{python}
import hashlib, json, os, re, sys
if "--version" in sys.argv:
    print(os.environ.get("FAKE_BISHENG_VERSION", "bisheng (stand-in) 1.0"))
    sys.exit(0)
with open(os.environ["FAKE_CANN_LOG"], "a") as f:
    f.write(json.dumps(["bisheng"] + sys.argv[1:]) + "\n")
src = next(a for a in sys.argv[1:] if a.endswith(".asc"))
text = open(src).read()
symbols = re.findall(r'extern "C" __global__ __vector__ void (\w+)\(', text)
open(sys.argv[sys.argv.index("-o") + 1], "w").write(json.dumps(
    {{"symbols": symbols, "sha": hashlib.sha256(text.encode()).hexdigest()}}))
'''

_FAKE_LD = r'''#!{python}
import json, os, sys
sys.path.insert(0, {root!r})
from build_tools import elf
with open(os.environ["FAKE_CANN_LOG"], "a") as f:
    f.write(json.dumps(["ld.lld"] + sys.argv[1:]) + "\n")
obj = json.load(open(next(a for a in sys.argv[1:] if a.endswith(".o"))))
symbols = [] if os.environ.get("FAKE_DROP_SYMBOL") else obj["symbols"]
open(sys.argv[sys.argv.index("-o") + 1], "wb").write(elf.write_minimal(symbols, text=bytes.fromhex(obj["sha"])))
'''


@pytest.fixture(scope="module")
def fake_cann(tmp_path_factory):
    """A CANN toolkit stand-in under ASCEND_HOME_PATH (compiler/ccec_compiler/bin): bisheng writes the entry symbols
    it finds in the source, ld.lld an ELF executable defining them; both log their arguments."""
    tmp_path = tmp_path_factory.mktemp("cann")
    home = tmp_path / "cann"
    bindir = home / "compiler" / "ccec_compiler" / "bin"
    bindir.mkdir(parents=True)
    for name, text in (("bisheng", _FAKE_BISHENG), ("ld.lld", _FAKE_LD)):
        p = bindir / name
        p.write_text(text.format(python=sys.executable, root=str(ROOT)))
        p.chmod(0o755)
    log = tmp_path / "cann.log"
    return {"home": home, "log": log, "env": {"ASCEND_HOME_PATH": str(home), "FAKE_CANN_LOG": str(log)}}


# the compile and shard tests: one per_token_cast variant (packed scales, FP4 nibbles) and two topk_gate register
# counts of the default manifest, so that two shards lowering without the cache take ~15 s, not a minute
SMALL_MANIFEST = """[build]
arches = []
ascend = ["dav-3510"]

[[ascend.per_token_cast]]
in_dtype = ["bfloat16"]
fmt = ["e2m1"]
num_per_channels = [32]
sf_kind = ["ue8m0"]

[[ascend.topk_gate]]
num_vregs = [1, 4]
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("manifest") / "small.toml"
    path.write_text(SMALL_MANIFEST)
    keys = {v.key for v in ascend.load(path)[1]}
    assert len(keys) == 3 and keys <= {v.key for v in _default_variants()}
    return path


def _calls(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_finds_bisheng_and_ld_lld(tmp_path, monkeypatch, fake_cann):
    for k in _CANN_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PATH", _env()["PATH"])
    assert ascend.find_bisheng() is None
    monkeypatch.setenv("ASCEND_HOME_PATH", str(fake_cann["home"]))
    bisheng = ascend.find_bisheng()
    assert bisheng == str(fake_cann["home"] / "compiler" / "ccec_compiler" / "bin" / "bisheng")
    assert ascend.find_ld_lld(bisheng) == str(Path(bisheng).with_name("ld.lld"))
    own = tmp_path / "bh" / "bin"
    own.mkdir(parents=True)
    shutil.copy(bisheng, own / "bisheng")
    monkeypatch.setenv("BISHENG_HOME", str(own.parent))
    assert ascend.find_bisheng() == str(own / "bisheng")  # BISHENG_HOME first
    assert ascend.find_ld_lld(ascend.find_bisheng()) == str(Path(bisheng).with_name("ld.lld"))  # from the toolkit


@pytest.fixture(scope="module")
def compiled(lowered, fake_cann, small, tmp_path_factory):
    """The small manifest's Ascend variants (their sources from the warm cache) compiled by the stand-in toolchain."""
    tmp_path = tmp_path_factory.mktemp("compiled")
    env = _env(KERNELKILN_BUILD_CACHE=str(lowered["cache"]), **fake_cann["env"])
    r = _build(small, tmp_path / "store", env, "--gen-dir", str(tmp_path / "gen"))
    assert r.returncode == 0, r.stdout + r.stderr
    log = tmp_path / "compile.log"  # this build's calls (later builds append to the stand-in's log)
    shutil.copy(fake_cann["log"], log)
    return {"store": tmp_path / "store", "gen": tmp_path / "gen", "stdout": r.stdout, "env": env, "log": log,
            "manifest": small, "variants": ascend.load(small)[1]}


def test_compile_step_runs_bisheng_and_ld_lld_with_the_device_flags(compiled):
    calls = _calls(compiled["log"])
    n = len(compiled["variants"])
    bishengs, links = [c for c in calls if c[0] == "bisheng"], [c for c in calls if c[0] == "ld.lld"]
    assert len(bishengs) == len(links) == n
    from tilelang.env import TILELANG_TEMPLATE_PATH
    for c in bishengs:
        args = c[1:]
        assert args[:len(ascend.BISHENG_FLAGS)] == list(ascend.BISHENG_FLAGS)
        assert f"--npu-arch={TARGET}" in args and "--cce-aicore-only" in args and f"-I{TILELANG_TEMPLATE_PATH}" in args
        src = next(a for a in args if a.endswith(".asc"))
        assert src.startswith(str(ascend.CANONICAL_SOURCE_ROOT) + "/")
        assert args[args.index("-o") + 1].endswith(".rel.o")
    for c in links:
        args = c[1:]
        assert args[:len(ascend.LINK_FLAGS)] == ["-m", "aicorelinux", "-Ttext", "0", "--no-mmap-output-file"]
        assert args[args.index("-o") + 1].endswith(f".{TARGET}.aibin")
    assert f"ascend: {n} kernels compiled with" in compiled["stdout"]


def test_compiled_store_holds_checked_binaries_and_runtime_entries(compiled):
    folder = compiled["store"] / "ascend"
    index = json.loads((folder / "index.json").read_text())
    summary = json.loads((folder / "runtime" / "summary.json").read_text())
    assert index["status"] == summary["status"] == "built" and summary["arches"] == [TARGET]
    assert summary["toolchain"]["bisheng"] == "bisheng (stand-in) 1.0"
    assert summary["ops"] == sorted({v.op for v in compiled["variants"]})
    assert len(index["variants"]) == len(compiled["variants"])
    for v in index["variants"]:
        data = (folder / v["binary"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == v["sha256"] and len(data) == v["bytes"]
        image = elf.parse(data)
        assert all(image.defined(k["symbol"]) for k in v["spec"]["kernels"])
        assert v["sections"][".text"] == 32 and v["source_sha256"] == hashlib.sha256(
            (compiled["gen"] / v["binary"].replace(".aibin", ".asc")).read_bytes()).hexdigest()
        entries = json.loads((folder / "runtime" / f"{v['op']}.{v['arch']}.json").read_text())
        (entry,) = [e for e in entries if e["key"] == v["key"]]
        assert entry == {k: v[k] for k in ("op", "key", "variant", "arch", "binary", "sha256", "bytes", "spec")}
        assert ascend.contract(v["op"]).variant(**entry["variant"])  # a key the runtime can compute
    assert not list(compiled["store"].rglob("*.asc"))  # no source ships
    r = subprocess.run([sys.executable, "-m", "build_tools", "check-store", "--store", str(compiled["store"])],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "Ascend binaries (built) verified" in r.stdout, r.stdout + r.stderr


def test_a_binary_without_its_entry_symbol_fails_the_build(lowered, fake_cann, small, tmp_path):
    env = _env(KERNELKILN_BUILD_CACHE=str(lowered["cache"]), FAKE_DROP_SYMBOL="1",
               FAKE_BISHENG_VERSION="bisheng (stand-in, broken linker)", **fake_cann["env"])
    r = _build(small, tmp_path / "store", env)
    assert r.returncode != 0
    assert "entry symbol" in r.stderr and "is not defined" in r.stderr and "per_token_cast(" in r.stderr, r.stderr


def test_check_store_rejects_a_changed_binary(compiled, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(compiled["store"], store)
    folder = store / "ascend"
    victim = next(folder.glob("*.aibin"))
    victim.write_bytes(victim.read_bytes() + b"\0")
    with pytest.raises(ascend.AscendError, match="do not match"):
        ascend.check_store(store)


def test_two_shards_and_merge_equal_one_build_with_independent_lowerings(lowered, compiled, fake_cann, tmp_path):
    """Shards lower with no cache (a second, independent lowering): their sources equal the first lowering's, and
    the merged Ascend store equals the one-build store byte for byte."""
    env = dict(compiled["env"], KERNELKILN_BUILD_CACHE="off")
    shards = [tmp_path / f"shard{i}" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-m", "build_tools", "build", "--manifest", str(compiled["manifest"]),
                               "--arches",
                               TARGET, "--out-dir", str(s / "kernels"), "--gen-dir", str(s / "gen"), "-j", "1",
                               "--shard", f"{i}/2"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i, s in enumerate(shards)]  # both at once
    for p in procs:
        out, _ = p.communicate()
        assert p.returncode == 0, out
    parts = [json.loads((s / "kernels" / "ascend" / "index.json").read_text())["variants"] for s in shards]
    assert all(parts) and not {v["binary"] for v in parts[0]} & {v["binary"] for v in parts[1]}
    for s in shards:
        for src in (s / "gen").glob(f"*.{TARGET}.asc"):
            assert src.read_bytes() == (lowered["gen"] / src.name).read_bytes(), src.name
    merged = tmp_path / "merged"
    r = subprocess.run([sys.executable, "-m", "build_tools", "merge", "--out-dir", str(merged),
                        *(str(s / "kernels") for s in shards)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    one = compiled["store"] / "ascend"
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(merged / "ascend") for p in (merged / "ascend").rglob("*") if p.is_file())
    for f in files:
        assert (merged / "ascend" / f).read_bytes() == (one / f).read_bytes(), f


def test_merge_rejects_conflicting_ascend_shards(compiled, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(compiled["store"], other)
    folder = other / "ascend"
    index = json.loads((folder / "index.json").read_text())
    v = index["variants"][0]
    data = elf.write_minimal([k["symbol"] for k in v["spec"]["kernels"]], text=b"\x01" * 32)
    (folder / v["binary"]).write_bytes(data)
    v["sha256"], v["bytes"] = hashlib.sha256(data).hexdigest(), len(data)
    ascend.write_index(folder, index)
    with pytest.raises(ascend.AscendError, match="differs between shards"):
        ascend.merge([compiled["store"], other], tmp_path / "merged", log=lambda *a: None)


def test_kernelkiln_ascend_wheel_holds_the_ascend_store(compiled, lowered, tmp_path):
    import zipfile
    from build_tools import ascend_wheel
    whl = ascend_wheel.build(compiled["store"], tmp_path / "dist")
    version = ascend_wheel._version()
    assert whl.name == f"kernelkiln_ascend-{version}-py3-none-any.whl"
    names, meta = ascend_wheel.summary(whl)
    folder = compiled["store"] / "ascend"
    want = sorted(f"kernelkiln_ascend/_kernels/{p.relative_to(folder).as_posix()}" for p in folder.rglob("*")
                  if p.is_file())
    assert sorted(n for n in names if "/_kernels/" in n) == want
    assert f"Requires-Dist: kernelkiln=={version}" in meta and "Name: kernelkiln-ascend" in meta
    with zipfile.ZipFile(whl) as z:
        record = z.read(f"kernelkiln_ascend-{version}.dist-info/RECORD").decode().splitlines()
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            if digest:
                data = z.read(name)
                assert digest == ascend_wheel._record_hash(data) and int(size) == len(data), name
        assert z.read("kernelkiln_ascend/_kernels/index.json") == (folder / "index.json").read_bytes()
    assert ascend_wheel.build(compiled["store"], tmp_path / "again").read_bytes() == whl.read_bytes()  # reproducible
    with pytest.raises(ascend.AscendError, match="not compiled"):
        ascend_wheel.build(lowered["store"], tmp_path / "none")
