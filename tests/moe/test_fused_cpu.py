"""Argument errors of the dispatch/combine ops: raised before any device work (no GPU needed)."""
import pytest
import torch

import kernelkiln

moe = kernelkiln.moe


def _map(t=4, k=2):
    return torch.zeros(t, k, dtype=torch.int32)


def test_mapping_errors():
    idx = torch.zeros(4, 2, dtype=torch.int64)
    with pytest.raises(TypeError, match="topk_idx"):
        moe.get_fused_mapping(idx.int(), 8, 0, 128)
    with pytest.raises(ValueError, match="topk_idx must be contiguous"):
        moe.get_fused_mapping(torch.zeros(2, 4, dtype=torch.int64).T, 8, 0, 128)
    with pytest.raises(ValueError, match="num_experts"):
        moe.get_fused_mapping(idx, 513, 0, 128)
    with pytest.raises(TypeError, match="num_expanded_tokens"):
        moe.get_fused_mapping(idx, 8, 1.5, 128)
    with pytest.raises(ValueError, match="alignment"):
        moe.get_fused_mapping(idx, 8, 0, 0)
    with pytest.raises(TypeError, match="force_no_sync"):
        moe.get_fused_mapping(idx, 8, 0, 128, 1)
    with pytest.raises(ValueError, match="CUDA"):
        moe.get_fused_mapping(idx, 8, 64, 128)


def test_expand_errors():
    x = torch.zeros(4, 256, dtype=torch.bfloat16)
    p2e = torch.zeros(16, dtype=torch.int32)
    with pytest.raises(TypeError, match="token_topk_to_pos"):
        moe.expand_to_fused(x, _map().long(), p2e)
    with pytest.raises(ValueError, match="num_tokens"):
        moe.expand_to_fused(x, _map(3), p2e)
    with pytest.raises(TypeError, match="pos_to_expert"):
        moe.expand_to_fused(x, _map(), p2e.float())
    with pytest.raises(ValueError, match="inner stride"):
        moe.expand_to_fused(torch.zeros(256, 4, dtype=torch.bfloat16).T, _map(), p2e)
    with pytest.raises(ValueError, match="CUDA"):
        moe.expand_to_fused(x, _map(), p2e)
    data = x.to(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="QuantTensor"):
        moe.expand_to_fused_with_sf(data, 128, _map(), p2e)
    with pytest.raises(ValueError, match="num_per_channels"):
        moe.expand_to_fused_with_sf((data, torch.zeros(4, 2)), 64, _map(), p2e)
    with pytest.raises(ValueError, match="shape"):
        moe.expand_to_fused_with_sf((data, torch.zeros(4, 3)), 128, _map(), p2e)
    with pytest.raises(ValueError, match="use_tma_aligned_col_major_sf"):
        moe.expand_to_fused_with_sf((data, torch.zeros(4, 1, dtype=torch.int32)), 128, _map(), p2e)


def test_reduce_errors():
    x = torch.zeros(16, 256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="multiple of 256"):
        moe.reduce_fused(torch.zeros(16, 128, dtype=torch.bfloat16), None, _map())
    with pytest.raises(TypeError, match="x has dtype"):
        moe.reduce_fused(x.half(), None, _map())
    with pytest.raises(ValueError, match="fp8_format"):
        moe.reduce_fused(x, None, _map(), "e5m2")
    with pytest.raises(ValueError, match="sf is only allowed"):
        moe.reduce_fused(x, None, _map(), "", torch.ones(1))
    with pytest.raises(ValueError, match="topk_weights"):
        moe.reduce_fused(x, torch.zeros(4, 3), _map())
    with pytest.raises(ValueError, match="x_sf"):
        moe.reduce_fused((x, torch.zeros(15)), None, _map())
    with pytest.raises(ValueError, match="out must be"):
        moe.reduce_fused(x, None, _map(), out=torch.zeros(4, 128, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="CUDA"):
        moe.reduce_fused(x, None, _map())
