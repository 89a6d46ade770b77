"""The Ascend runtime against the launch specs the build really produces: three Ascend variants of the CI subset
are lowered here (build_tools.ascend.lower_variant, CPU only), written into a store with stand-in binaries (there is
no bisheng here), and the public functions are called on stand-in NPU tensors (tests/npu_standin.py) with the
recording libascendcl.so stand-in (tests/acl_standin.py). Every argument the lowered kernel takes (TileLang drops
unused ones and reorders the rest) must arrive at its recorded offset with the value the call implies. What this
does not prove: that the kernels compute the right bits (that needs CANN and an Ascend 950)."""
import importlib.util
import json
import struct
import sys
from pathlib import Path

import acl_standin
import npu_standin
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tilelang") is None,
                                reason="tilelang (build toolchain) is not installed: pip install -r requirements/build.txt")

WANTED = [("per_token_cast", {"in_dtype": "bfloat16", "fmt": "e4m3", "num_per_channels": 128, "sf_kind": "fp32"}),
          ("per_token_cast", {"in_dtype": "bfloat16", "fmt": "e2m1", "num_per_channels": 32, "sf_kind": "ue8m0"}),
          ("topk_gate", {"num_vregs": 4})]

_SCRIPT = r"""
import ctypes, os
import npu_standin, acl_standin
NpuTensor = npu_standin.install()
import torch, kernelkiln
rec = acl_standin.Recorder(ctypes.CDLL(os.environ["KERNELKILN_ASCENDCL"]))
out = {}

def record(name, **tensors):
    r = rec.launch()
    out[name] = dict(args=r["args"].hex(), blocks=r["blocks"], ub=r["attr_value"], symbol=rec.lookups()[-1],
                     ptrs={n: t.data_ptr() for n, t in tensors.items()},
                     strides={n: list(t.stride()) for n, t in tensors.items()})

x = NpuTensor(torch.randn(300, 7168).bfloat16())
q, sf = kernelkiln.quant.per_token_cast(x, "e4m3", 128)
record("e4m3", x=x, q=q, sf=sf)
x2 = NpuTensor(torch.randn(70, 512).bfloat16())
q2, sf2 = kernelkiln.quant.per_token_cast(x2, "e2m1", 32, use_tma_aligned_col_major_sf=True, round_sf=True,
                                          use_packed_ue8m0=True)
record("e2m1", x=x2, q=q2, sf=sf2)
scores = NpuTensor(torch.randn(100, 256))
idx = kernelkiln.moe.topk_gate(scores, 6)
from kernelkiln.moe import _topk_ascend
record("topk", scores=scores, idx=idx, err=_topk_ascend._words[0])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def lowered():
    from build_tools import ascend
    targets, variants = ascend.load(str(ROOT / "manifests" / "ci-subset.toml"))
    chosen = [v for v in variants if (v.op, v.as_dict()) in WANTED]
    assert len(chosen) == len(WANTED), "the CI subset's Ascend variants changed: update WANTED"
    return [ascend.lower_variant(v, targets[0])[1] for v in chosen]


@pytest.fixture(scope="module")
def records(lowered, tmp_path_factory):
    d = tmp_path_factory.mktemp("ascend-real")
    lib = acl_standin.build(d)
    if lib is None:
        pytest.skip("no C compiler (cc or gcc) on this machine to build the libascendcl.so stand-in")
    entries, images = [], {}
    for launch in lowered:
        image = f"stand-in binary of {launch['key']}".encode()
        e, img = acl_standin.entry(launch["op"], launch["variant"], launch["params"], launch["kernels"], image)
        entries.append(e)
        images.update(img)
    store = acl_standin.write_store(d / "store", entries, images)
    env = {"KERNELKILN_ASCENDCL": str(lib), "KERNELKILN_ASCEND_KERNEL_DIR": str(store),
           "KERNELKILN_KERNEL_DIR": str(d / "no-cuda-store")}
    return npu_standin.run_script(_SCRIPT, env), {(e["op"], json.dumps(e["variant"], sort_keys=True)): e
                                                  for e in entries}


def _decode(record, entry):
    spec = entry["spec"]
    (k,) = spec["kernels"]
    raw = bytes.fromhex(record["args"])
    assert len(raw) == k["args_bytes"] and record["symbol"] == k["symbol"] and record["ub"] == k["dyn_ubuf_bytes"]
    codes = {"ptr": "<Q", "int32": "<i", "float32": "<f"}
    return {spec["params"][a["param"]]["name"]: struct.unpack_from(codes[a.get("ctype", "ptr")], raw, a["offset"])[0]
            for a in k["args"]}


def _entry(entries, op, variant):
    return entries[(op, json.dumps(variant, sort_keys=True))]


def test_per_token_cast_e4m3_reaches_the_lowered_kernel(records):
    recs, entries = records
    r = recs["e4m3"]
    got = _decode(r, _entry(entries, *WANTED[0]))
    want = dict(x=r["ptrs"]["x"], out=r["ptrs"]["q"], sf=r["ptrs"]["sf"], num_tokens=300, hidden=7168, x_ld=7168,
                out_ld=7168, sf_rows=300, sf_ld=56, round_sf=0, sf_col_major=0, num_cores=64,
                clamp_min=struct.unpack("<f", struct.pack("<f", 1e-4))[0])
    assert got == {n: want[n] for n in got}  # the lowered kernel's arguments, each with the call's value
    assert {"x", "out", "sf", "num_tokens", "hidden", "num_cores"} <= set(got)
    assert r["blocks"] == 64  # 10 x 14 tiles of work on the stand-in's 64 vector cores


def test_per_token_cast_e2m1_packed_column_major_reaches_the_lowered_kernel(records):
    recs, entries = records
    r = recs["e2m1"]
    got = _decode(r, _entry(entries, *WANTED[1]))
    assert r["strides"]["sf"] == [1, 72]  # 70 tokens padded to 72 (four int32 words per 16 bytes)
    want = dict(x=r["ptrs"]["x"], out=r["ptrs"]["q"], sf=r["ptrs"]["sf"], num_tokens=70, hidden=512, x_ld=512,
                out_ld=256, sf_rows=4, sf_ld=72, round_sf=1, sf_col_major=1, num_cores=3)
    assert {n: v for n, v in got.items() if n != "clamp_min"} == {n: want[n] for n in got if n != "clamp_min"}
    assert r["blocks"] == 3  # ceil(70 / 32) x 1 tiles: three cores


def test_topk_gate_reaches_the_lowered_kernel(records):
    recs, entries = records
    r = recs["topk"]
    got = _decode(r, _entry(entries, *WANTED[2]))
    want = dict(scores=r["ptrs"]["scores"], topk_idx=r["ptrs"]["idx"], err=r["ptrs"]["err"], num_tokens=100,
                num_experts=256, num_topk=6, num_cores=64)
    assert got == {n: want[n] for n in got} and {"scores", "topk_idx", "err", "num_cores"} <= set(got)
    assert r["blocks"] == 64


def test_every_lowered_argument_layout_is_the_loaders(lowered):
    from kernelkiln._runtime import ascend
    for launch in lowered:
        for k in launch["kernels"]:
            lay = ascend.AclArgLayout(k["args"])
            assert [(a["offset"], a["size"]) for a in k["args"]] == list(zip(lay.offsets, lay.sizes))
            assert k["args_bytes"] == lay.size
