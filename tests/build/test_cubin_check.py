"""Tests for build_tools.cubin_check.

The integration tests compile tiny kernels with nvcc (no GPU needed) and
inspect them with cuobjdump; they are skipped when either tool is missing.
The parser tests run on canned cuobjdump output and need no tools.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from build_tools import cubin_check as cc

# --------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------

MAIN_CU = r"""
#include <cuda.h>

extern "C" __global__ void vec_add(const float* a, float* b, int n, double s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] * s;
}

extern "C" __global__ void tma_kernel(const __grid_constant__ CUtensorMap map,
                                      float* out) {
  out[threadIdx.x] = reinterpret_cast<const float*>(&map)[threadIdx.x & 31];
}

extern "C" __global__ void big_smem(float* out) {
  __shared__ float tile[16384];  // 64 KiB static
  tile[threadIdx.x] = out[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[16383 - threadIdx.x];
}

extern "C" __global__ void __launch_bounds__(256) bounded(float* out, char c) {
  out[threadIdx.x] = c;
}

// Dynamically indexed local array: stack frame, but no register pressure.
extern "C" __global__ void local_array(const int* __restrict__ idx,
                                       float* __restrict__ out) {
  float a[256];
  for (int i = 0; i < 256; ++i) a[(i * idx[0]) & 255] = out[i];
  out[threadIdx.x] = a[idx[threadIdx.x] & 255];
}

// C++ linkage: mangled symbol.
__global__ void mangled(float* out, int n) { if (threadIdx.x < n) out[0] = 1.f; }
"""

# 48 live values under a 24-register cap: ptxas must spill.
SPILL_CU = r"""
extern "C" __global__ void spill(const float* __restrict__ in,
                                 float* __restrict__ out, int n) {
  float v[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) v[i] = in[threadIdx.x + i * n];
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 48; ++i) acc += v[i] * v[(i * 7 + j) % 48];
#pragma unroll
  for (int i = 0; i < 48; ++i) out[threadIdx.x + i * n] = v[i] + acc;
}
"""

MAIN_SPEC = [
    {"symbol": "vec_add", "param_sizes": [8, 8, 4, 8]},
    {"symbol": "tma_kernel", "param_sizes": [128, 8]},
    {"symbol": "big_smem", "param_sizes": [8], "dyn_smem_bytes": 0},
    {"symbol": "bounded", "param_sizes": [8, 1], "block_threads": 256},
    {"symbol": "local_array", "param_sizes": [8, 8]},
    {"symbol": "_Z7mangledPfi", "param_sizes": [8, 4]},
]

SM90_SMEM_LIMIT = 232448


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------


def _tool_skip_reason() -> str | None:
    if shutil.which("nvcc") is None:
        return "nvcc not found on PATH"
    try:
        cc.find_cuobjdump()
    except FileNotFoundError as e:
        return f"cuobjdump not available: {e}"
    return None


@pytest.fixture(scope="module")
def cubins(tmp_path_factory) -> dict[str, Path]:
    reason = _tool_skip_reason()
    if reason:
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("cubins")
    (d / "main.cu").write_text(MAIN_CU)
    (d / "spill.cu").write_text(SPILL_CU)
    jobs = {
        "main_sm90a": ("main.cu", ["-arch=sm_90a"]),
        "main_sm100a": ("main.cu", ["-arch=sm_100a"]),
        # ptxas raises caps below 24 to 24, so ask for 24 directly.
        "spill_sm90a": ("spill.cu", ["-arch=sm_90a", "-maxrregcount=24"]),
    }

    def build(item):
        name, (src, flags) = item
        out = d / f"{name}.cubin"
        cmd = ["nvcc", "--cubin", "-O3", *flags, "-o", str(out), str(d / src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed:\n{proc.stderr}")
        return name, out

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return dict(pool.map(build, jobs.items()))


@pytest.fixture(scope="module")
def info90(cubins) -> cc.CubinInfo:
    return cc.inspect_cubin(cubins["main_sm90a"])


@pytest.fixture(scope="module")
def info100(cubins) -> cc.CubinInfo:
    return cc.inspect_cubin(cubins["main_sm100a"])


def _spec(**overrides) -> list[dict]:
    """MAIN_SPEC with per-symbol replacements: _spec(vec_add={...})."""
    out = []
    for k in MAIN_SPEC:
        k = dict(k)
        k.update(overrides.get(k["symbol"], {}))
        out.append(k)
    return out


# --------------------------------------------------------------------------
# inspect_cubin
# --------------------------------------------------------------------------


@pytest.mark.parametrize("fixture,arch", [("info90", "sm_90a"), ("info100", "sm_100a")])
def test_inspect_basic(request, fixture, arch):
    info = request.getfixturevalue(fixture)
    assert info.arch == arch
    assert set(info.kernels) == {
        "vec_add", "tma_kernel", "big_smem", "bounded", "local_array", "_Z7mangledPfi"
    }
    k = info.kernels["vec_add"]
    assert k.param_sizes == [8, 8, 4, 8]
    assert k.param_offsets == [0, 8, 16, 24]
    assert k.registers and k.registers > 0
    assert k.max_threads is None
    assert k.static_shared_bytes == 0
    assert not k.uses_local_memory and not k.likely_spill
    assert info.kernels["bounded"].param_sizes == [8, 1]
    assert info.kernels["bounded"].max_threads == (256, 1, 1)
    assert info.kernels["bounded"].max_threads_per_block == 256


@pytest.mark.parametrize("fixture", ["info90", "info100"])
def test_tensormap_param_is_128_bytes(request, fixture):
    k = request.getfixturevalue(fixture).kernels["tma_kernel"]
    assert k.param_sizes == [128, 8]
    # The map is placed for 64-byte alignment in the constant bank, so its
    # offset within the parameter block varies (0x70 on sm_90a, 0 on sm_100a).
    assert k.param_offsets[1] == k.param_offsets[0] + 128


@pytest.mark.parametrize("fixture", ["info90", "info100"])
def test_static_shared_excludes_reserved_window(request, fixture):
    info = request.getfixturevalue(fixture)
    k = info.kernels["big_smem"]
    # cuobjdump folds the 1 KiB system-reserved window into SHARED on sm_90+;
    # the driver reports (and limits) only the 64 KiB the kernel declared.
    assert info.reserved_shared_bytes == 1024
    assert k.shared_section_bytes == 65536 + 1024
    assert k.resources["SHARED"] == 65536 + 1024
    assert k.static_shared_bytes == 65536


def test_local_array_is_stack_but_not_spill(info90):
    k = info90.kernels["local_array"]
    assert k.stack_bytes >= 1024
    assert k.uses_local_memory
    assert not k.likely_spill
    assert k.max_registers == 255


def test_to_dict_roundtrip(info90):
    import json

    d = json.loads(json.dumps(info90.to_dict()))
    assert d["arch"] == "sm_90a"
    assert d["kernels"]["tma_kernel"]["param_sizes"] == [128, 8]


# --------------------------------------------------------------------------
# check_cubin
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name,arch", [("main_sm90a", "sm_90a"), ("main_sm100a", "sm_100a")])
def test_correct_spec_passes(cubins, name, arch):
    assert cc.check_cubin(cubins[name], arch, MAIN_SPEC) == []


def test_arch_normalization_accepted(cubins):
    assert cc.check_cubin(cubins["main_sm90a"], "SM90a", MAIN_SPEC[:1]) == []


def test_wrong_arch_reported(cubins):
    problems = cc.check_cubin(cubins["main_sm100a"], "sm_90a", MAIN_SPEC)
    assert len(problems) == 1, problems
    assert "arch mismatch" in problems[0]
    assert "sm_100a" in problems[0] and "sm_90a" in problems[0]


def test_wrong_param_count_reported(cubins):
    spec = _spec(vec_add={"param_sizes": [8, 8, 4]})
    problems = cc.check_cubin(cubins["main_sm90a"], "sm_90a", spec)
    assert len(problems) == 1, problems
    assert "vec_add" in problems[0] and "parameter count" in problems[0]


def test_wrong_param_size_reported(cubins):
    spec = _spec(vec_add={"param_sizes": [8, 8, 8, 8]})  # int passed as 8 bytes
    problems = cc.check_cubin(cubins["main_sm90a"], "sm_90a", spec)
    assert len(problems) == 1, problems
    assert "parameter sizes differ" in problems[0]
    assert "#2: cubin 4 B, spec 8 B" in problems[0]


def test_tensormap_passed_as_pointer_reported(cubins):
    spec = _spec(tma_kernel={"param_sizes": [8, 8]})
    problems = cc.check_cubin(cubins["main_sm100a"], "sm_100a", spec)
    assert len(problems) == 1, problems
    assert "#0: cubin 128 B, spec 8 B" in problems[0]


def test_missing_symbol_reported(cubins):
    spec = MAIN_SPEC + [{"symbol": "mangled", "param_sizes": [8, 4]}]
    problems = cc.check_cubin(cubins["main_sm90a"], "sm_90a", spec)
    assert len(problems) == 1, problems
    assert "'mangled'" in problems[0] and "not found" in problems[0]
    assert "_Z7mangledPfi" in problems[0]  # lists what is there


def test_shared_memory_over_limit_reported(cubins):
    fits = SM90_SMEM_LIMIT - 65536
    ok = _spec(big_smem={"dyn_smem_bytes": fits, "max_shared_bytes": SM90_SMEM_LIMIT})
    assert cc.check_cubin(cubins["main_sm90a"], "sm_90a", ok) == []

    over = _spec(big_smem={"dyn_smem_bytes": fits + 1, "max_shared_bytes": SM90_SMEM_LIMIT})
    problems = cc.check_cubin(cubins["main_sm90a"], "sm_90a", over)
    assert len(problems) == 1, problems
    assert "shared memory over limit" in problems[0]
    assert "static 65536 B" in problems[0]


def test_static_shared_alone_over_limit_reported(cubins):
    spec = _spec(big_smem={"max_shared_bytes": 48 * 1024})
    problems = cc.check_cubin(cubins["main_sm100a"], "sm_100a", spec)
    assert len(problems) == 1 and "big_smem" in problems[0], problems


def test_default_shared_limit_applies(cubins):
    spec = _spec(big_smem={"dyn_smem_bytes": 200_000})  # no max_shared_bytes
    problems = cc.check_cubin(cubins["main_sm100a"], "sm_100a", spec)
    assert len(problems) == 1 and "> 232448 B" in problems[0], problems


def test_spills_reported(cubins):
    spec = [{"symbol": "spill", "param_sizes": [8, 8, 4]}]
    info = cc.inspect_cubin(cubins["spill_sm90a"])
    k = info.kernels["spill"]
    assert k.stack_bytes > 0 and k.likely_spill
    assert k.registers is not None and k.registers <= 24 == k.max_registers

    problems = cc.check_cubin(cubins["spill_sm90a"], "sm_90a", spec)
    assert len(problems) == 1, problems
    assert "register spills" in problems[0]
    assert f"STACK {k.stack_bytes} B" in problems[0] and "LOCAL 0 B" in problems[0]

    # An explicit stack budget replaces the heuristic.
    allowed = [dict(spec[0], max_stack_bytes=k.stack_bytes)]
    assert cc.check_cubin(cubins["spill_sm90a"], "sm_90a", allowed) == []


def test_local_array_reported_only_with_stack_budget(cubins):
    spec = _spec(local_array={"max_stack_bytes": 0})
    problems = cc.check_cubin(cubins["main_sm90a"], "sm_90a", spec)
    assert len(problems) == 1, problems
    assert "local_array" in problems[0] and "max_stack_bytes 0" in problems[0]


def test_block_threads_over_launch_bounds_reported(cubins):
    spec = _spec(bounded={"block_threads": [512, 1, 1]})
    problems = cc.check_cubin(cubins["main_sm90a"], "sm_90a", spec)
    assert len(problems) == 1 and "__launch_bounds__ 256" in problems[0], problems


def test_several_problems_reported_together(cubins):
    spec = [
        {"symbol": "vec_add", "param_sizes": [8]},
        {"symbol": "nope", "param_sizes": []},
    ]
    problems = cc.check_cubin(cubins["main_sm90a"], "sm_100a", spec)
    assert len(problems) == 3, problems


def test_fatbin_and_garbage_reported(cubins, tmp_path):
    fatbin = tmp_path / "two.fatbin"
    subprocess.run(
        ["nvcc", "-fatbin", "-O3", "-gencode", "arch=compute_90a,code=sm_90a",
         "-gencode", "arch=compute_100a,code=sm_100a", "-o", str(fatbin),
         str(Path(cubins["spill_sm90a"]).parent / "spill.cu")],
        check=True, capture_output=True, timeout=120,
    )
    problems = cc.check_cubin(fatbin, "sm_90a", [])
    assert len(problems) == 1 and "2 ELF images" in problems[0], problems
    with pytest.raises(cc.CubinInspectError):
        cc.inspect_cubin(fatbin)

    junk = tmp_path / "junk.cubin"
    junk.write_bytes(b"not a cubin")
    problems = cc.check_cubin(junk, "sm_90a", [])
    assert len(problems) == 1 and "cannot inspect" in problems[0], problems


def test_missing_file_reported(tmp_path):
    problems = cc.check_cubin(tmp_path / "absent.cubin", "sm_90a", [])
    assert len(problems) == 1 and "not found" in problems[0]
    with pytest.raises(FileNotFoundError):
        cc.inspect_cubin(tmp_path / "absent.cubin")


@pytest.mark.parametrize(
    "spec",
    [[{"param_sizes": [8]}], [{"symbol": "k"}], [{"symbol": "k", "param_sizes": ["8"]}], ["k"]],
)
def test_malformed_spec_raises(spec, tmp_path):
    with pytest.raises(ValueError):
        cc.check_cubin(tmp_path / "x.cubin", "sm_90a", spec)


# --------------------------------------------------------------------------
# find_cuobjdump
# --------------------------------------------------------------------------


def _fake_exe(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_find_cuobjdump_env_var(monkeypatch, tmp_path):
    fake = _fake_exe(tmp_path / "my-cuobjdump")
    monkeypatch.setenv(cc.ENV_VAR, str(fake))
    assert cc.find_cuobjdump() == str(fake)


def test_find_cuobjdump_env_var_invalid(monkeypatch, tmp_path):
    monkeypatch.setenv(cc.ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match=cc.ENV_VAR):
        cc.find_cuobjdump()


def test_find_cuobjdump_path(monkeypatch, tmp_path):
    _fake_exe(tmp_path / "cuobjdump")
    monkeypatch.delenv(cc.ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cc.find_cuobjdump() == str(tmp_path / "cuobjdump")


def test_find_cuobjdump_not_found(monkeypatch, tmp_path):
    monkeypatch.delenv(cc.ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(cc, "_cuobjdump_from_distribution", lambda: None)
    monkeypatch.setattr(cc, "_cuobjdump_from_cuda_install", lambda: None)
    with pytest.raises(FileNotFoundError, match="pip install nvidia-cuda-cuobjdump"):
        cc.find_cuobjdump()


def test_find_cuobjdump_from_distribution(monkeypatch, tmp_path):
    from importlib import metadata

    try:
        metadata.distribution(cc.DIST_NAME)
    except metadata.PackageNotFoundError:
        pytest.skip(f"pip distribution {cc.DIST_NAME} is not installed")
    monkeypatch.delenv(cc.ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = cc.find_cuobjdump()
    assert found.endswith(os.path.join("bin", "cuobjdump"))
    assert os.access(found, os.X_OK)


# --------------------------------------------------------------------------
# Parser on canned output (no tools needed)
# --------------------------------------------------------------------------

# Trimmed from real cuobjdump 13.x output for an sm_90a cubin.
CANNED_ELF = textwrap.dedent(
    """\

    64-bit ELF: type=ET_EXEC, ABI=8, sm=90a, toolkit=13.0, flags=0x6005a04
    Sections:
    Index Offset   Size ES Align                      Type    Flags Link     Info Name
        1     40    1e4  0  1                       STRTAB        0    0        0 .shstrtab

    .section .symtab
       Num            Value             Size  Type          Bind    Vis        Other                                Ndx  Name
         0                0                0  NOTYPE        LOCAL   DEFAULT    -                                      0  (null)
       0x4                0              0x4  OBJECT        WEAK    DEFAULT    -                                      0  .nv.reservedSmem.offset0
       0xd                0            0x100  FUNC          GLOBAL  DEFAULT    ENTRY                               0x10  k1
       0xe                0            0x200  FUNC          GLOBAL  DEFAULT    ENTRY                               0x11  k2

    .nv.constant0.k1
    0x00000000 0x00000000 0x00000000 0x00000000

    .nv.info
    \t<0x1>
    \tAttribute:\tEIATTR_REGCOUNT
    \tFormat:\tEIFMT_SVAL
    \tValue:\tfunction: k1(0xd)\tregister count: 40
    \t<0x2>
    \tAttribute:\tEIATTR_FRAME_SIZE
    \tFormat:\tEIFMT_SVAL
    \tValue:\tfunction: k1(0xd)\tframe size: 0x10
    \t<0x3>
    \tAttribute:\tEIATTR_REGCOUNT
    \tFormat:\tEIFMT_SVAL
    \tValue:\tfunction: k2(0xe)\tregister count: 12


    .nv.info.k1
    \t<0x1>
    \tAttribute:\tEIATTR_KPARAM_INFO
    \tFormat:\tEIFMT_SVAL
    \tValue:\tIndex : 0x0\tOrdinal : 0x1\tOffset  : 0x80\tSize    : 0x4
    \t\tPointee's logAlignment : 0x0\tSpace : 0x0\tcbank : 0x1f\tParameter Space : CBANK\t
    \t<0x2>
    \tAttribute:\tEIATTR_KPARAM_INFO
    \tFormat:\tEIFMT_SVAL
    \tValue:\tIndex : 0x0\tOrdinal : 0x0\tOffset  : 0x0\tSize    : 0x80
    \t\tPointee's logAlignment : 0x0\tSpace : 0x0\tcbank : 0x1f\tParameter Space : CBANK\t
    \t<0x3>
    \tAttribute:\tEIATTR_MAXREG_COUNT
    \tFormat:\tEIFMT_HVAL
    \tValue:\t0x28
    \t<0x4>
    \tAttribute:\tEIATTR_MAX_THREADS
    \tFormat:\tEIFMT_SVAL
    \tValue:\t0x80 0x1 0x1 
    \t<0x5>
    \tAttribute:\tunknown Attribute
    \tFormat:\tEIFMT_HVAL
    \tValue:\t0x101


    .nv.info.k2
    \t<0x1>
    \tAttribute:\tEIATTR_CBANK_PARAM_SIZE
    \tFormat:\tEIFMT_HVAL
    \tValue:\t0x0
    """
)

CANNED_RES = textwrap.dedent(
    """\

    Resource usage:
     Common:
      GLOBAL:0
     Function k2:
      REG:12 STACK:0 SHARED:5120 LOCAL:0 CONSTANT[0]:528 TEXTURE:0 SURFACE:0 SAMPLER:0
     Function k1:
      REG:40 STACK:16 SHARED:0 LOCAL:0 CONSTANT[0]:660 TEXTURE:0 SURFACE:0 SAMPLER:0
    """
)


def test_parser_on_canned_output():
    info = cc._parse_cubin("x.cubin", CANNED_ELF, CANNED_RES)
    assert info.arch == "sm_90a" and info.toolkit == "13.0"
    assert info.reserved_shared_bytes == 1024
    assert list(info.kernels) == ["k1", "k2"]
    k1, k2 = info.kernels["k1"], info.kernels["k2"]
    assert k1.param_sizes == [128, 4] and k1.param_offsets == [0, 128]
    assert (k1.registers, k1.max_registers) == (40, 40)
    assert k1.max_threads == (128, 1, 1)
    assert (k1.stack_bytes, k1.frame_bytes) == (16, 16)
    assert k1.likely_spill
    assert k1.resources["CONSTANT[0]"] == 660
    assert "unknown Attribute" in k1.attributes
    assert k2.param_sizes == [] and k2.param_bytes == 0
    assert (k2.shared_section_bytes, k2.static_shared_bytes) == (5120, 4096)
    assert not k2.uses_local_memory


def test_parser_rejects_output_without_elf():
    with pytest.raises(cc.CubinInspectError):
        cc._parse_cubin("x.cubin", "nothing here\n", "")


@pytest.mark.parametrize(
    "raw,norm", [("sm_90a", "sm_90a"), ("SM90a", "sm_90a"), ("100a", "sm_100a"), (" sm_120 ", "sm_120")]
)
def test_normalize_arch(raw, norm):
    assert cc.normalize_arch(raw) == norm
