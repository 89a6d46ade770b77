"""The FP4 encoder's arithmetic (kernels/common/numerics.e2m1_code_bits), modelled in numpy, against the
reference rounding of tilekiln.torch: three FMA candidates 2**23 + offset + |y| * scale rounded to fp32, the
smallest of their bits as int32 (the kernel's __vimin3_s32), capped at the bits of 2**23 + 7.

This checks the formula on the values where it can go wrong (every tie point and its fp32 neighbours, the
subnormals, the saturation region, inf and NaN) plus a dense sweep of [0, 8); the GPU tests check the
compiled kernels bit for bit.
"""
import numpy as np
import torch

from tilekiln.torch.quant import _e2m1_nibbles

MAGIC = 2.0 ** 23
CAP_BITS = np.int32(0x4B000007)
CANDIDATES = ((2.0, 0.0), (1.0, 2.0), (0.5, 4.0))  # (scale, offset) of kernels/common/numerics.py
GPU_CANONICAL_NAN = np.int32(0x7FFFFFFF)  # what an FFMA returns for a NaN operand


def _model_codes(y):
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
    return (np.minimum(smallest, CAP_BITS) & 0xFF).astype(np.int32)


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
