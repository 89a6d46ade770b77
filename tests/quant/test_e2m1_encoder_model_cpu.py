"""The FP4 encoder's arithmetic (kernels/common/numerics.e2m1_code_bits and e2m1_pack), modelled in numpy, against the
reference rounding of kernelkiln.torch: three FMA candidates 2**23 + offset + |y| * scale rounded to fp32, the
smallest of their bits as int32 (the kernel's __vimin3_s32), capped at the bits of 2**23 + 7.

The packing model follows e2m1_pack instruction by instruction (PTX prmt semantics, including the
sign-replicate selectors that CUDA's __byte_perm lacks).

This checks the formula on the values where it can go wrong (every tie point and its fp32 neighbours, the
subnormals, the saturation region, inf and NaN) plus a dense sweep of [0, 8); the GPU tests check the
compiled kernels bit for bit.
"""
import numpy as np
import pytest
import torch

from kernelkiln.torch.quant import _e2m1_nibbles, pack_e2m1

# The kernel's selector constant, from the kernel source (build time only: the GPU machine has no tilelang, and
# this CPU test is skipped there).
TOP_BYTE_SIGNS = pytest.importorskip("kernels.common.numerics", reason="tilelang (build toolchain) not installed"
                                     ).TOP_BYTE_SIGNS

MAGIC = 2.0 ** 23
CAP_BITS = np.int32(0x4B000007)
CANDIDATES = ((2.0, 0.0), (1.0, 2.0), (0.5, 4.0))  # (scale, offset) of kernels/common/numerics.py
GPU_CANONICAL_NAN = np.int32(0x7FFFFFFF)  # what an FFMA returns for a NaN operand


def _model_code_bits(y):
    """The int32 bits e2m1_code_bits returns (2**23 + code, capped)."""
    a = np.abs(y.astype(np.float32)).astype(np.float64)
    bits = []
    for scale, offset in CANDIDATES:
        # a * scale + (2**23 + offset) is exact in float64 for every a that can reach a tie, so the cast to
        # float32 is the FMA's single RNE rounding.
        with np.errstate(invalid="ignore", over="ignore"):
            c = (a * scale + (MAGIC + offset)).astype(np.float32)
        b = c.view(np.int32).copy()
        b[np.isnan(c)] = GPU_CANONICAL_NAN
        bits.append(b)
    smallest = np.minimum(np.minimum(bits[0], bits[1]), bits[2])
    return np.minimum(smallest, CAP_BITS).view(np.uint32)


def _model_codes(y):
    return (_model_code_bits(y) & 0xFF).astype(np.int32)


def _prmt(a, b, selector):
    """PTX prmt.b32 (default mode): result byte n is byte (nibble n & 7) of {b, a}; nibble bit 3 replicates that
    byte's sign over the result byte. __byte_perm is the same with bit 3 clear."""
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    out = np.zeros_like(a)
    for n in range(4):
        nib = (selector >> (4 * n)) & 0xF
        byte = src[nib & 7]
        if nib & 8:
            byte = np.where(byte & 0x80, 0xFF, 0).astype(np.uint64)
        out |= byte << (8 * n)
    return out


def _model_pack8(y):
    """e2m1_pack of rows of 8 fp32 values [N, 8] -> uint32 words [N], as the kernel computes it."""
    y = y.astype(np.float32)
    codes = _model_code_bits(y).astype(np.uint64)
    bits = y.view(np.uint32).astype(np.uint64)
    bits[np.isnan(y)] = 0x7FFFFFFF  # the FMUL that scaled the value returns the canonical NaN
    pairs = [(codes[:, 2 * j + 1] * 16 + codes[:, 2 * j]) & 0xFFFFFFFF for j in range(4)]
    magnitudes = _prmt(_prmt(pairs[0], pairs[1], 0x0040), _prmt(pairs[2], pairs[3], 0x0040), 0x5410)

    def signs(first):
        return _prmt(_prmt(bits[:, first], bits[:, first + 2], TOP_BYTE_SIGNS),
                     _prmt(bits[:, first + 4], bits[:, first + 6], TOP_BYTE_SIGNS), 0x5410)

    return magnitudes | (signs(0) & 0x08080808) | (signs(1) & 0x80808080)


def _reference_words(y):
    packed = pack_e2m1(_e2m1_nibbles(torch.from_numpy(y)))  # int8 [N, 4]
    return packed.view(torch.int32).numpy().view(np.uint32)[:, 0].astype(np.uint64)


def _reference_codes(y):
    return (_e2m1_nibbles(torch.from_numpy(y)) & 7).numpy()


def _neighbours(values, ulps=3):
    """Each value and its `ulps` fp32 neighbours on both sides (non-negative)."""
    bits = np.asarray(values, dtype=np.float32).view(np.int32)
    steps = np.arange(-ulps, ulps + 1, dtype=np.int32)
    around = (bits[:, None] + steps[None, :]).ravel()
    return around[around >= 0].view(np.float32)


def test_encoder_model_matches_reference_at_ties_and_edges():
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    special = [np.float32(2.0 ** -149), np.float32(2.0 ** -126), 1e-30, 5.9999995, 6.0000005, 7.0, 7.9999995,
               8.0, 1e6, 3.4028235e38]
    y = _neighbours(grid + ties + special, ulps=8)
    y = np.concatenate([y, -y, np.array([np.inf, -np.inf, np.nan, -np.nan], dtype=np.float32)])
    np.testing.assert_array_equal(_model_codes(y), _reference_codes(y))


def test_encoder_model_matches_reference_on_a_dense_sweep():
    # every 64th fp32 value in [0, 8): about 17 million magnitudes, every binade the encoder sees
    top = np.float32(8.0).view(np.int32)
    y = np.arange(0, top, 64, dtype=np.int32).view(np.float32)
    np.testing.assert_array_equal(_model_codes(y), _reference_codes(y))


def test_encoder_model_on_random_scaled_values():
    rng = np.random.default_rng(0)
    y = (rng.standard_normal(1 << 20) * 2.5).astype(np.float32)
    np.testing.assert_array_equal(_model_codes(y), _reference_codes(y))


def test_pack_model_matches_reference_words():
    """Signs (including -0 and NaN of either sign), magnitudes and nibble order of the packed words."""
    rng = np.random.default_rng(1)
    edges = _neighbours([0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.0], ulps=2)
    values = np.concatenate([edges, -edges, np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], np.float32),
                             (rng.standard_normal(1 << 16) * 3).astype(np.float32)])
    rows = rng.choice(values, size=(1 << 16, 8)).astype(np.float32)
    np.testing.assert_array_equal(_model_pack8(rows), _reference_words(rows))
