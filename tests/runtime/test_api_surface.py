# ruff: noqa: E501  (SPEC_SIGNATURES is a one-line-per-op transcription of the spec tables)
"""API surface: every implemented operator has tile_kernels' name, parameter names, order and defaults.

SPEC_SIGNATURES transcribes the signatures of docs/SPEC.md §3.1-§3.3 (2.1 names; v1-only ops under their v1
names). An op listed there but not exported yet must be in NOT_YET, so a new export or a drifted signature
fails here."""
import ast
import inspect

import pytest
import torch

import kernelkiln

SPEC_SIGNATURES = {  # name -> [(parameter, default as written in the spec or None)]
    'aux_fi': [('topk_idx', None), ('num_experts', None), ('num_aux_topk', None)],
    'batched_transpose': [('x', None)],
    'batched_transpose_weight_sf': [('sf', None), ('block_size', None), ('transpose_sf1s', None), ('outs', None)],
    'cast': [('x', None), ('dtype', None), ('stochastic_rounding', 'False')],
    'cast_back': [('x', None), ('fmt', None), ('x_block_size', None), ('x_special_fmt', 'None')],
    'cast_back_e5m6': [('x', None), ('fmt', None), ('x_block_size', None)],
    'expand_to_fused': [('x', None), ('token_topk_to_pos', None), ('pos_to_expert', None)],
    'expand_to_fused_with_sf': [('x', None), ('num_per_channels', None), ('token_topk_to_pos', None), ('pos_to_expert', None), ('use_tma_aligned_col_major_sf', 'False')],
    'get_fused_mapping': [('topk_idx', None), ('num_experts', None), ('num_expanded_tokens', None), ('alignment', None), ('force_no_sync', 'False')],
    'group_count': [('group_idx', None), ('num_groups', None)],
    'inplace_unique_group_indices': [('group_indices', None), ('num_groups', None)],
    'mask_indices_by_tp': [('indices', None), ('n', None), ('num_ep_ranks', None), ('tp_rank', None), ('num_tp_ranks', None)],
    'moe_topk_gate': [('args', None), ('kwargs', None)],
    'moe_topk_gate_backward': [('scores', None), ('topk_idx', None), ('topk_weights', None), ('grad_topk_weights', None), ('routed_scaling_factor', None), ('scoring_func', "'sqrtsoftplus'"), ('mask', 'None'), ('grad_scores_sum', 'None'), ('out', 'None')],
    'moe_topk_gate_forward': [('logits', None), ('num_topk', None), ('use_shared_as_routed', None), ('num_shared_experts', None), ('routed_scaling_factor', None), ('ep_rank', None), ('scoring_func', "'sqrtsoftplus'"), ('mask', 'None'), ('bias', 'None'), ('image_bias', 'None'), ('image_token_mask', 'None'), ('fix_routing_mask', 'None'), ('to_physical_map', 'None'), ('logical_count', 'None'), ('unmapped_topk_idx', 'None'), ('force_random', 'None'), ('out', 'None'), ('scores', 'None')],
    'norm_backward': [('out_grad', None), ('x', None), ('weight', None), ('rstd', None), ('residual_out_grad', 'None'), ('out_scale', '1.0'), ('weight_grad', 'None')],
    'norm_forward': [('x', None), ('weight', None), ('eps', None), ('residual', 'None'), ('out_scale', '1.0'), ('out', 'None'), ('residual_out', 'None'), ('with_rstd', 'False')],
    'norm_forward_and_per_token_cast': [('x', None), ('weight', None), ('eps', None), ('fmt', None), ('num_per_channels', None), ('residual', 'None'), ('out_scale', '1.0'), ('use_tma_aligned_col_major_sf', 'False'), ('round_sf', 'False'), ('use_packed_ue8m0', 'False'), ('with_out_bf16', 'False'), ('out', 'None'), ('out_bf16', 'None'), ('residual_out', 'None'), ('mega_moe_sf', 'None'), ('mega_moe_block_m', '0'), ('with_rstd', 'False')],
    'normalize_weight': [('topk_weights', None)],
    'per_block_cast': [('x', None), ('fmt', None), ('block_size', None), ('use_tma_aligned_col_major_sf', 'False'), ('round_sf', 'False'), ('use_packed_ue8m0', 'False'), ('out', 'None')],
    'per_block_cast_lossless': [('x', None), ('fmt', None), ('x_block_size', None), ('out_block_size', None), ('use_tma_aligned_col_major_sf', 'False'), ('round_sf', 'False'), ('use_packed_ue8m0', 'False')],
    'per_channel_cast': [('x', None), ('fmt', None), ('num_per_tokens', None), ('round_sf', 'False'), ('num_per_channels', 'None'), ('use_packed_ue8m0', 'False')],
    'per_channel_cast_and_transpose': [('x', None), ('fmt', None), ('num_per_tokens', None), ('round_sf', 'False')],
    'per_channel_cast_fused': [('x', None), ('fmt', None), ('num_per_tokens', None), ('round_sf', 'False'), ('num_per_channels', 'None'), ('pos_to_token', 'None')],
    'per_token_cast': [('x', None), ('fmt', None), ('num_per_channels', None), ('x_block_size', 'None'), ('use_tma_aligned_col_major_sf', 'False'), ('round_sf', 'False'), ('use_packed_ue8m0', 'False'), ('use_e4m3_sf', 'False'), ('stochastic_cast', 'False'), ('out', 'None')],
    'per_token_cast_and_cast_back': [('x', None), ('fmt', None), ('num_per_channels', None), ('round_sf', 'False'), ('use_e4m3_sf', 'False')],
    'per_token_cast_back': [('x', None), ('fmt', None), ('num_per_channels', None), ('x_special_fmt', 'None')],
    'per_token_cast_to_e5m6': [('x', None), ('num_per_channels', None), ('use_tma_aligned_col_major_sf', 'False'), ('round_sf', 'False'), ('use_packed_ue8m0', 'False')],
    'reduce_fused': [('x', None), ('topk_weights', None), ('token_topk_to_pos', None), ('fp8_format', "''"), ('sf', 'None'), ('out', 'None')],
    'swiglu_backward': [('x', None), ('act_x_grad', None), ('fmt', None), ('psum_num_tokens_per_expert', 'None'), ('topk_weights', 'None'), ('routed_scaling_factor', 'None'), ('clamp_value', 'None'), ('do_recompute', 'False')],
    'swiglu_backward_and_per_token_cast': [('x', None), ('act_x_grad', None), ('fmt', None), ('num_per_channels', None), ('psum_num_tokens_per_expert', 'None'), ('topk_weights', 'None'), ('routed_scaling_factor', 'None'), ('use_tma_aligned_col_major_sf', 'False'), ('round_sf', 'False'), ('use_packed_ue8m0', 'False'), ('clamp_value', 'None'), ('do_recompute', 'False')],
    'swiglu_forward': [('x', None), ('fmt', None), ('psum_num_tokens_per_expert', 'None'), ('topk_weights', 'None'), ('routed_scaling_factor', 'None'), ('clamp_value', 'None'), ('clamped_count', 'None')],
    'swiglu_forward_and_per_token_cast': [('x', None), ('fmt', None), ('num_per_channels', None), ('psum_num_tokens_per_expert', 'None'), ('topk_weights', 'None'), ('routed_scaling_factor', 'None'), ('use_tma_aligned_col_major_sf', 'False'), ('round_sf', 'False'), ('use_packed_ue8m0', 'False'), ('clamp_value', 'None'), ('clamped_count', 'None')],
    'top2_sum_gate': [('logits', None), ('bias', None), ('num_topk', None), ('num_topk_groups', None), ('num_groups', None), ('use_shared_as_routed', None), ('num_shared_experts', None), ('routed_scaling_factor', None), ('ep_rank', None), ('num_ep_ranks', None), ('tp_rank', None), ('num_tp_ranks', None), ('scoring_func', None), ('mask', 'None'), ('fix_routing_mask', 'None'), ('to_physical_map', 'None'), ('logical_count', 'None'), ('unmapped_topk_idx', 'None')],
    'topk_gate': [('scores', None), ('num_topk', None)],
    'topk_sum_and_topk_group_idx': [('scores', None), ('num_topk_sum', None), ('num_topk_groups', None)],
    'transpose': [('x', None)],
    'unpack_from_e2m1fn_x2': [('x', None), ('out_dtype', 'torch.float32')],
}
NOT_YET = set()
FAMILIES = ("quant", "moe", "transpose")


def _exported(name):
    hits = [getattr(getattr(kernelkiln, fam), name) for fam in FAMILIES if hasattr(getattr(kernelkiln, fam), name)]
    return hits[0] if hits else None


@pytest.mark.parametrize("name", sorted(SPEC_SIGNATURES))
def test_signature_matches_the_spec(name):
    fn = _exported(name)
    if name in NOT_YET:
        assert fn is None, f"{name} is exported now: remove it from NOT_YET"
        return
    assert fn is not None, f"{name} is not exported by kernelkiln.{'/'.join(FAMILIES)}"
    params = list(inspect.signature(fn).parameters.values())
    assert [p.name for p in params] == [n for n, _ in SPEC_SIGNATURES[name]], f"{name}{inspect.signature(fn)}"
    for p, (n, default) in zip(params, SPEC_SIGNATURES[name]):
        if default is None:
            assert p.default is inspect.Parameter.empty or p.kind == p.VAR_POSITIONAL, f"{name}: {n} has a default"
        else:
            want = getattr(torch, default[len("torch."):]) if default.startswith("torch.") else ast.literal_eval(default)
            assert p.default == want, f"{name}: {n}={p.default!r}, spec says {default}"


def test_tile_kernels_alias_and_config_knobs():
    tile_kernels = kernelkiln  # `import kernelkiln as tile_kernels`
    for knob in ("set_num_sms", "get_num_sms", "get_device_num_sms", "set_pdl", "get_pdl", "set_token_alignment",
                 "get_token_alignment", "set_amax_clamp_for_quant", "get_amax_clamp_for_quant",
                 "use_deterministic_algorithms", "get_deterministic_algorithms"):
        assert callable(getattr(tile_kernels, knob)), knob
    assert callable(tile_kernels.quant.per_token_cast) and callable(tile_kernels.moe.topk_gate)
