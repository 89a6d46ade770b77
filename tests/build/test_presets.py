"""Model-family presets (manifests/presets/*.toml): the default wheel covers each one, and each family's shapes
pass the runtime's argument checks (checked on CPU: a valid call fails only for want of a CUDA tensor)."""
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # build_tools

from build_tools import manifest  # noqa: E402
from kernelkiln_contract import moe as moe_contract  # noqa: E402  (loaded by build_tools.manifest)

PRESET_DIR = ROOT / "manifests" / "presets"
PRESETS = sorted(p.stem for p in PRESET_DIR.glob("*.toml"))
CUDA_ONLY = "need a CUDA tensor"  # checks.cuda: raised only after every shape/option check passed
# MoE models (router and casts); the Engram preset has its own shape table and check below
MOE_PRESETS = [n for n in PRESETS if "experts" in tomllib.loads((PRESET_DIR / f"{n}.toml").read_text())["build"]["model"]]


def _model(name):
    return tomllib.loads((PRESET_DIR / f"{name}.toml").read_text())["build"]["model"]


def test_the_five_families_have_presets():
    assert {"deepseek-v3", "kimi-k2", "qwen3-moe", "glm-4.5", "mixtral"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_default_manifest_covers_preset(name):
    """Generic over ops: every variant of every op a preset lists is built by the default wheel."""
    arches, variants = manifest.load(PRESET_DIR / f"{name}.toml")
    default_arches, default_variants = manifest.load(manifest.default_manifest_path())
    assert variants, f"{name} expands to no variant (every combination rejected by invalid_reason?)"
    assert set(arches) <= set(default_arches)
    missing = sorted({v.key for v in variants} - {v.key for v in default_variants})
    assert not missing, f"preset {name}: not in manifests/default.toml: {missing}"


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_model_shape_table(name):
    m = _model(name)
    assert isinstance(m["name"], str) and m["hidden"] > 0 and 1 <= m["topk"] <= m["experts"]


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_topk_gate_shapes_pass_checks_and_select_preset_variants(name):
    from kernelkiln.moe import _topk
    m = _model(name)
    e, k = m["experts"], m["topk"]
    with pytest.raises(ValueError, match=CUDA_ONLY):
        _topk._topk_gate_checked(torch.zeros(4, e, dtype=torch.float32), k)
    # the variants the runtime picks for this E (scalar loads always; float4 loads when the row allows)
    _, variants = manifest.load(PRESET_DIR / f"{name}.toml")
    built = {v.as_dict()["experts_per_lane"]: set() for v in variants if v.op == "topk_gate"}
    for v in variants:
        if v.op == "topk_gate":
            built[v.as_dict()["experts_per_lane"]].add(v.as_dict()["vector_loads"])
    # the runtime's own selection rules (kernelkiln_contract.moe), not a copy of them
    epl = moe_contract.experts_per_lane(e)
    wanted = {moe_contract.topk_vector_loads(e, aligned) for aligned in (False, True)}
    assert built.get(epl) == wanted, f"{name}: E={e} selects experts_per_lane={epl}, vector_loads {wanted}"


_SF_FLAGS = {"fp32": {}, "ue8m0": {"round_sf": True, "use_packed_ue8m0": True}, "e4m3": {"use_e4m3_sf": True}}


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_per_token_cast_hidden_size_passes_checks(name):
    from kernelkiln.quant import _per_token
    m = _model(name)
    _, variants = manifest.load(PRESET_DIR / f"{name}.toml")
    plain = [v.as_dict() for v in variants if v.op == "per_token_cast" and v.as_dict()["in_sf_kind"] == "none"
             and not v.as_dict()["precomputed"]]
    for p in plain:
        x = torch.zeros(4, m["hidden"], dtype=getattr(torch, p["in_dtype"]))
        with pytest.raises(ValueError, match=CUDA_ONLY):
            _per_token.per_token_cast(x, p["fmt"], p["num_per_channels"], None, False, **{
                "round_sf": False, "use_packed_ue8m0": False, "use_e4m3_sf": False, "stochastic_cast": False,
                "out": None, **_SF_FLAGS[p["sf_kind"]]})


def test_plan_accepts_a_preset(tmp_path):
    out = tmp_path / "plan.cmake"
    r = subprocess.run([sys.executable, "-m", "build_tools", "plan", "--preset", "mixtral", "--cmake-out", str(out)],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode and "nvcc not found" in r.stderr:
        pytest.skip("no nvcc (build toolchain) here")
    assert r.returncode == 0, r.stderr
    assert "4 variants x 2 arches = 8 kernels in 4 compile units" in r.stdout  # 3 per_token_cast + 1 topk_gate
    units = out.read_text().split("TK_UNITS ")[1]
    assert units.count("quant-ops-unit-") == 1 and units.count("moe-ops-unit-") == 1  # small ops: family pools


def test_unknown_preset_lists_the_presets():
    r = subprocess.run([sys.executable, "-m", "build_tools", "plan", "--preset", "nope", "--cmake-out", "/dev/null"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and "unknown preset 'nope'" in r.stderr and "deepseek-v3" in r.stderr


def test_default_manifest_builds_the_rows_the_runtime_picks():
    """For every plain-input per_token_cast variant of the default manifest, the variant with the rows per thread
    that the runtime selects (the contract's rule, which the runtime calls) is built too."""
    from kernelkiln_contract.quant import PER_TOKEN_CAST, per_token_rows
    _, variants = manifest.load(manifest.default_manifest_path())
    keys = {v.key for v in variants}
    plain = [v.as_dict() for v in variants if v.op == "per_token_cast" and v.as_dict()["in_sf_kind"] == "none"]
    assert plain
    for p in plain:
        rows = per_token_rows(p["in_dtype"], p["fmt"], p["precomputed"], p["stochastic"], p["roundtrip"])
        want = manifest.Variant("per_token_cast", tuple({**p, "rows": rows}.items()))
        assert want.key in keys, f"the runtime would pick {want.key}, which the default manifest does not build"
        assert PER_TOKEN_CAST.invalid_reason(want.as_dict()) is None


def test_engram_preset_shapes_pass_checks_and_select_preset_variants():
    """Engram-27B's hash shape selects a variant the preset builds, and its hidden size passes the weight checks."""
    from kernelkiln.engram import _engram_hash, _fused_weight
    m = _model("engram-27b")
    n, mm, layers, h, hc = (m["max_ngram_size"], m["num_embed_table_per_ngram"], m["num_ngram_layers"], m["hidden"],
                            m["hc_mult"])
    _, variants = manifest.load(PRESET_DIR / "engram-27b.toml")
    keys = {v.key for v in variants}
    for masked in (False, True):
        key = manifest.Variant("engram_hash", tuple(zip(_engram_hash.CONTRACT.param_names,
                                                        _engram_hash.CONTRACT.key(max_ngram_size=n,
                                                                                  num_embed_table_per_ngram=mm,
                                                                                  has_image_token_mask=masked)))).key
        assert key in keys, f"engram-27b does not build {key}"
    vocab = torch.ones(layers, n - 1, mm, dtype=torch.int32)
    with pytest.raises(ValueError, match=CUDA_ONLY):
        _engram_hash.engram_hash(torch.zeros(4, n, dtype=torch.int32), torch.ones(layers, n, dtype=torch.int64), vocab,
                                 torch.zeros(layers, (n - 1) * mm, dtype=torch.int32))
    w = torch.zeros(hc, h, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=CUDA_ONLY):
        _fused_weight.fused_weight(w, w.clone())
