"""Compile units (build_tools/units.py): planning, unit sources, and that a kernel compiled in a unit has the
same SASS as the same kernel compiled alone."""
import importlib.util
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from build_tools import units  # noqa: E402

needs_toolchain = pytest.mark.skipif(importlib.util.find_spec("tilelang") is None,
                                     reason="tilelang (build toolchain) is not installed: pip install -r "
                                            "requirements/build.txt")


def _variants(op, n):
    return [SimpleNamespace(op=op, stem=f"{op}-{i:012x}") for i in range(n)]


def test_plan_groups_by_op_in_chunks_and_ignores_order():
    vs = _variants("per_token_cast", 35) + _variants("topk_gate", 3)
    shuffled = vs[:]
    random.Random(0).shuffle(shuffled)
    plan = units.plan(vs)
    assert plan == units.plan(shuffled) == units.plan(vs + vs[:5])  # order and duplicates do not matter
    assert [(u.group, len(u.stems)) for u in plan] == [("moe-ops", 3), ("per_token_cast", 16), ("per_token_cast", 16),
                                                        ("per_token_cast", 3)]
    assert sorted(s for u in plan for s in u.stems) == sorted(v.stem for v in vs)
    assert len({u.name for u in plan}) == len(plan)
    # a unit's name depends on its members only
    assert units.plan(vs[:16])[0].name == plan[1].name


def test_small_ops_share_units_within_their_family():
    small = [("mhc_post_fwd", 1), ("mhc_post_bwd", 1), ("mhc_sinkhorn_fwd", 2), ("grad_w_reduce", 1),
             ("engram_gate_fwd", units.SMALL_OP)]
    vs = [v for op, n in small for v in _variants(op, n)] + _variants("mhc_pre_apply_mix_fwd", 20)
    plan = units.plan(vs)
    assert [(u.group, len(u.stems)) for u in plan] == [
        ("engram-ops", 1),  # grad_w_reduce; engram_gate_fwd has SMALL_OP variants: a group of its own
        ("engram_gate_fwd", units.SMALL_OP),
        ("mhc-ops", 4),  # the 1 + 1 + 2 small mHC variants
        ("mhc_pre_apply_mix_fwd", 16), ("mhc_pre_apply_mix_fwd", 4),
    ]
    assert [s.split("-")[0] for s in plan[2].stems] == ["mhc_post_bwd", "mhc_post_fwd", "mhc_sinkhorn_fwd",
                                                        "mhc_sinkhorn_fwd"]  # in stem order: each op together
    # the same variants with a larger threshold of smallness: fewer groups, the same members overall
    assert sorted(s for u in units.plan(vs, small_op=64) for s in u.stems) == sorted(v.stem for v in vs)


def test_unit_source_keeps_each_preamble_and_wraps_each_body(tmp_path):
    for stem, sym in (("op-aaaaaaaaaaaa", "k_aaaaaaaaaaaa"), ("op-bbbbbbbbbbbb", "k_bbbbbbbbbbbb")):
        (tmp_path / f"{stem}.sm_90a.cu").write_text(
            f'#include <a.h>\nextern "C" __global__ void {sym}(int n);\n'
            f'static __device__ int helper() {{ return 1; }}\n'
            f'extern "C" __global__ void {sym}(int n) {{ }}\n')
    unit = units.Unit("op", ("op-aaaaaaaaaaaa", "op-bbbbbbbbbbbb"))
    text = units.unit_source(tmp_path, unit, "sm_90a")
    assert units.member_stems(text) == list(unit.stems)
    assert text.count("#include <a.h>") == 2  # guarded headers: the second include is a no-op
    # the same file-local helper name in two members compiles: each body has a namespace of its own
    assert re.findall(r"namespace (\w+) \{", text) == ["tk_op_aaaaaaaaaaaa", "tk_op_bbbbbbbbbbbb"]
    with pytest.raises(ValueError, match="no extern"):
        units.split_source("#include <a.h>\n")


def _sass(cuobjdump, cubin):
    """{function: [instruction words]} (whitespace-normalized: cuobjdump pads columns per file)."""
    nvdisasm = Path(cuobjdump).with_name("nvdisasm")
    env = dict(os.environ, NVDISASM_PATH=str(nvdisasm.parent)) if nvdisasm.exists() else None
    out = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, env=env)
    if out.returncode and "nvdisasm" in out.stderr:
        pytest.skip("cuobjdump -sass needs nvdisasm: pip install -r requirements/build.txt")
    out.check_returncode()
    funcs, current = {}, None
    for line in out.stdout.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            current = funcs.setdefault(m.group(1), [])
        elif current is not None and line.strip().startswith("/*"):
            current.append(line.split())
    return funcs


@needs_toolchain
def test_a_kernel_in_a_unit_has_the_sass_it_has_alone(subset_store, tmp_path):
    from build_tools import cubin_check, toolchain
    gen = subset_store.with_name(subset_store.name + "-gen")
    # the unit with the most members (of one op, or of a family's pooled small ops)
    unit_cu = max(gen.glob("*-unit-*.sm_90a.cu"), key=lambda p: len(units.member_stems(p.read_text())))
    stems = units.member_stems(unit_cu.read_text())
    assert len(stems) >= 2
    cuobjdump = cubin_check.find_cuobjdump()
    in_unit = _sass(cuobjdump, unit_cu.with_suffix(".cubin"))
    assert len(in_unit) == len(stems)
    for stem in (stems[0], stems[-1]):
        alone = tmp_path / f"{stem}.cubin"
        subprocess.run(toolchain.nvcc_command(gen / f"{stem}.sm_90a.cu", alone, "sm_90a"), check=True)
        (name, code), = _sass(cuobjdump, alone).items()
        assert name.endswith(stem.rsplit("-", 1)[1]) and in_unit[name] == code, name


def test_unique_symbols_renames_the_kernel_and_its_dynamic_shared_array():
    from build_tools import lower
    src = ('extern "C" __global__ void k(uchar* y);\n'
           'extern "C" __global__ void __launch_bounds__(64, 1) k(uchar* y) {\n'
           '  extern __shared__ __align__(1024) uchar tile[];\n  int tiles = 2;\n  y[0] = tile[tiles];\n}\n')
    launch = {"kernels": [{"symbol": "k"}]}
    out, launch = lower.unique_symbols(src, launch, "op-0123456789ab")
    assert launch["kernels"][0]["symbol"] == "k_0123456789ab"
    assert out.count("k_0123456789ab(") == 2 and "tile_0123456789ab[]" in out and "tile_0123456789ab[tiles]" in out
    with pytest.raises(Exception, match="not found"):
        lower.unique_symbols(src, {"kernels": [{"symbol": "missing"}]}, "op-0123456789ab")
