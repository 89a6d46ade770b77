"""v1 expert-major dispatch/combine: get_fused_mapping, expand_to_fused(_with_sf), reduce_fused.

Kernels: kernels/moe/fused_mapping.py, expand_fused.py, reduce_fused.py. References:
kernelkiln.torch.fused. Every check runs before any device work, so errors are testable on CPU.
"""
import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln_contract.moe import EXPAND_TO_FUSED as EXP_CONTRACT
from kernelkiln_contract.moe import GET_FUSED_MAPPING as MAP_CONTRACT
from kernelkiln_contract.moe import REDUCE_FUSED as RED_CONTRACT
from kernelkiln_contract.moe import REDUCE_FUSED_PAIRS, expand_vec_bytes, fused_mapping_threads

MAP_OP = MAP_CONTRACT.op
EXP_OP = EXP_CONTRACT.op
RED_OP = RED_CONTRACT.op
MAX_EXPERTS = 512
PAD_ROWS = 16
RED_DTYPES = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float8_e4m3fn: "float8_e4m3fn"}
I32_MAX = 2**31 - 1


def _align(x, a):
    return (x + a - 1) // a * a


def _int(name, v, lo, hi=None):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < lo or (hi is not None and v > hi):
        raise ValueError(f"{name} must be in {lo}..{hi if hi is not None else 'inf'}, got {v}")


def _map(name, t, t_rows=None):
    checks.tensor(name, t, (torch.int32,), ndim=2)
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {tuple(t.stride())}")
    if t_rows is not None and t.shape[0] != t_rows:
        raise ValueError(f"{name} must have {t_rows} rows (num_tokens), got shape {tuple(t.shape)}")


# ---------------------------------------------------------------- get_fused_mapping

def check_mapping(topk_idx, num_experts, num_expanded_tokens, alignment, force_no_sync):
    checks.tensor("topk_idx", topk_idx, (torch.int64,), ndim=2)
    if not topk_idx.is_contiguous():
        raise ValueError(f"topk_idx must be contiguous, got strides {tuple(topk_idx.stride())}")
    _int("num_experts", num_experts, 1, MAX_EXPERTS)
    _int("num_expanded_tokens", num_expanded_tokens, 0, I32_MAX)
    _int("alignment", alignment, 1, 1 << 16)
    checks.flag("force_no_sync", force_no_sync)
    t, k = topk_idx.shape
    if k < 1:
        raise ValueError(f"topk_idx.shape[1] (num_topk) must be >= 1, got {k}")
    if t * k + alignment * num_experts > I32_MAX:
        raise ValueError(f"num_tokens * num_topk + alignment * num_experts must fit in int32, got {t}*{k} and "
                         f"{alignment}*{num_experts}")


def get_fused_mapping(topk_idx, num_experts, num_expanded_tokens, alignment, force_no_sync=False):
    check_mapping(topk_idx, num_experts, num_expanded_tokens, alignment, force_no_sync)
    t, k = topk_idx.shape
    device = topk_idx.device
    should_sync = num_expanded_tokens == 0 and not force_no_sync
    n = _align(t * k + (alignment - 1) * num_experts, alignment) if should_sync else num_expanded_tokens
    i32 = dict(dtype=torch.int32, device=device)
    pos_to_expert, pos_to_token, pos_to_token_topk = (torch.empty((n,), **i32) for _ in range(3))
    token_topk_to_pos = torch.empty((t, k), **i32)
    expert_start, expert_end, ntpe = (torch.empty((num_experts,), **i32) for _ in range(3))
    checks.cuda("topk_idx", topk_idx)
    groups = config.get_num_sms()
    th = fused_mapping_threads(num_experts)
    numel = t * k
    chunk = _align(-(-numel // (groups * (th // 32))), 32)
    cnt = torch.empty((groups * num_experts,), **i32)
    launch(MAP_CONTRACT, MAP_CONTRACT.key(stage="count", threads=th), device,
           topk_idx=topk_idx.data_ptr(), pos_to_expert=pos_to_expert.data_ptr(), pos_to_token=pos_to_token.data_ptr(),
           pos_to_token_topk=pos_to_token_topk.data_ptr(), cnt=cnt.data_ptr(), numel=numel, num_experts=num_experts,
           num_expanded=n, chunk=chunk, num_ctas=groups)
    launch(MAP_CONTRACT, MAP_CONTRACT.key(stage="scan", threads=th), device,
           cnt=cnt.data_ptr(), expert_start=expert_start.data_ptr(), expert_end=expert_end.data_ptr(),
           num_tokens_per_expert=ntpe.data_ptr(), num_experts=num_experts, num_groups=groups, alignment=alignment)
    launch(MAP_CONTRACT, MAP_CONTRACT.key(stage="place", threads=th), device,
           topk_idx=topk_idx.data_ptr(), token_topk_to_pos=token_topk_to_pos.data_ptr(),
           pos_to_expert=pos_to_expert.data_ptr(), pos_to_token=pos_to_token.data_ptr(),
           pos_to_token_topk=pos_to_token_topk.data_ptr(), cnt=cnt.data_ptr(), expert_start=expert_start.data_ptr(),
           numel=numel, num_topk=k, num_experts=num_experts, num_expanded=n, chunk=chunk, num_ctas=groups)
    listed = []
    if should_sync:  # the only host synchronization: when the caller gave no size
        listed = ntpe.tolist()
        total = sum(listed)
        pos_to_expert, pos_to_token, pos_to_token_topk = (pos_to_expert[:total], pos_to_token[:total],
                                                          pos_to_token_topk[:total])
    return (pos_to_expert, pos_to_token, pos_to_token_topk, token_topk_to_pos, expert_start, expert_end, ntpe,
            listed)


# ---------------------------------------------------------------- expand_to_fused(_with_sf)

def check_expand(x, token_topk_to_pos, pos_to_expert):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [num_tokens, hidden], got shape {tuple(x.shape)}")
    if x.shape[0] > 0 and x.shape[1] > 1 and x.stride(1) != 1:
        raise ValueError(f"x must have inner stride 1, got strides {tuple(x.stride())}")
    _map("token_topk_to_pos", token_topk_to_pos, x.shape[0])
    checks.tensor("pos_to_expert", pos_to_expert, (torch.int32,), ndim=1)
    if pos_to_expert.numel() > 1 and pos_to_expert.stride(0) != 1:
        raise ValueError("pos_to_expert must be contiguous")
    for name, t in (("token_topk_to_pos", token_topk_to_pos), ("pos_to_expert", pos_to_expert)):
        checks.same_device(name, t, "x", x)


def _expand(x, token_topk_to_pos, pos_to_expert, sf=None, out_sf=None):
    t, h = x.shape
    n = pos_to_expert.shape[0]
    out = torch.empty((n, h), dtype=x.dtype, device=x.device)
    if t == 0 and n == 0:
        return out
    checks.cuda("x", x)
    es = x.element_size()
    row_bytes = h * es
    vb = expand_vec_bytes(row_bytes, x.stride(0) * es, x.data_ptr(), out.data_ptr())
    if sf is None:  # sf_cols = 0: no scales are copied
        scales = dict(x_sf=0, out_sf=0, sf_cols=0, x_sf_stride_t=0, x_sf_stride_k=0, out_sf_stride_n=0,
                      out_sf_stride_k=0)
    else:
        scales = dict(x_sf=sf.data_ptr(), out_sf=out_sf.data_ptr(), sf_cols=sf.shape[1], x_sf_stride_t=sf.stride(0),
                      x_sf_stride_k=sf.stride(1), out_sf_stride_n=out_sf.stride(0), out_sf_stride_k=out_sf.stride(1))
    launch(EXP_CONTRACT, EXP_CONTRACT.key(vec_bytes=vb), x.device,
           x=x.data_ptr(), out=out.data_ptr(), token_topk_to_pos=token_topk_to_pos.data_ptr(),
           pos_to_expert=pos_to_expert.data_ptr(), num_tokens=t, num_topk=token_topk_to_pos.shape[1], num_expanded=n,
           row_units=row_bytes // vb, x_stride_units=x.stride(0) * es // vb, pad_ctas=-(-n // PAD_ROWS), **scales)
    return out


def expand_to_fused(x, token_topk_to_pos, pos_to_expert):
    check_expand(x, token_topk_to_pos, pos_to_expert)
    return _expand(x, token_topk_to_pos, pos_to_expert)


def check_expand_with_sf(x, num_per_channels, token_topk_to_pos, pos_to_expert, use_tma_aligned_col_major_sf):
    if not (isinstance(x, (tuple, list)) and len(x) == 2):
        raise TypeError("x must be a QuantTensor: a (data, sf) pair")
    data, sf = x
    check_expand(data, token_topk_to_pos, pos_to_expert)
    checks.choice("num_per_channels", num_per_channels, (32, 128))
    checks.flag("use_tma_aligned_col_major_sf", use_tma_aligned_col_major_sf)
    checks.tensor("x[1] (sf)", sf, (torch.float32, torch.int32), ndim=2)
    h_sf = -(-data.shape[1] // num_per_channels)
    if sf.dtype == torch.int32:
        h_sf = -(-h_sf // 4)
        if not use_tma_aligned_col_major_sf:
            raise ValueError("packed UE8M0 scales (int32 sf) require use_tma_aligned_col_major_sf=True")
    if tuple(sf.shape) != (data.shape[0], h_sf):
        raise ValueError(f"x[1] (sf) must have shape {(data.shape[0], h_sf)} for hidden {data.shape[1]} and "
                         f"num_per_channels {num_per_channels}, got {tuple(sf.shape)}")
    checks.same_device("x[1] (sf)", sf, "x[0]", data)
    return h_sf


def expand_to_fused_with_sf(x, num_per_channels, token_topk_to_pos, pos_to_expert, use_tma_aligned_col_major_sf=False):
    h_sf = check_expand_with_sf(x, num_per_channels, token_topk_to_pos, pos_to_expert, use_tma_aligned_col_major_sf)
    data, sf = x
    n = pos_to_expert.shape[0]
    if use_tma_aligned_col_major_sf:
        out_sf = torch.empty((h_sf, _align(n, 4)), dtype=sf.dtype, device=sf.device)[:, :n].T
    else:
        out_sf = torch.empty((n, h_sf), dtype=sf.dtype, device=sf.device)
    out = _expand(data, token_topk_to_pos, pos_to_expert, sf, out_sf)
    return out, out_sf


# ---------------------------------------------------------------- reduce_fused

def check_reduce(x, topk_weights, token_topk_to_pos, fp8_format, sf, out):
    x, x_sf = (x[0], x[1]) if isinstance(x, (tuple, list)) and len(x) == 2 else (x, None)
    checks.tensor("x", x, tuple(RED_DTYPES), ndim=2)
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous, got strides {tuple(x.stride())}")
    n, h = x.shape
    if h % 256:
        raise ValueError(f"x.shape[1] (hidden) must be a multiple of 256, got {h}")
    checks.tensor("token_topk_to_pos", token_topk_to_pos, (torch.int32,), ndim=2)
    if not token_topk_to_pos.is_contiguous():
        raise ValueError("token_topk_to_pos must be contiguous")
    t, k = token_topk_to_pos.shape
    if topk_weights is not None:
        checks.tensor("topk_weights", topk_weights, (torch.float32,), ndim=2)
        if tuple(topk_weights.shape) != (t, k) or not topk_weights.is_contiguous():
            raise ValueError(f"topk_weights must be a contiguous [{t}, {k}] tensor, got {tuple(topk_weights.shape)}")
    if x_sf is not None:
        checks.tensor("x[1] (x_sf)", x_sf, (torch.float32,), ndim=1)
        if x_sf.shape[0] != n or not x_sf.is_contiguous():
            raise ValueError(f"x[1] (x_sf) must be a contiguous [{n}] tensor, got {tuple(x_sf.shape)}")
    checks.choice("fp8_format", fp8_format, ("", "e4m3"))
    out_dtype = torch.float8_e4m3fn if fp8_format == "e4m3" else x.dtype
    if sf is not None:
        if fp8_format != "e4m3":
            raise ValueError("sf is only allowed with fp8_format='e4m3' (FP8 output)")
        checks.tensor("sf", sf, (torch.float32,))
        if sf.numel() != 1:
            raise ValueError(f"sf must hold one fp32 value, got shape {tuple(sf.shape)}")
    if (RED_DTYPES[x.dtype], RED_DTYPES[out_dtype]) not in REDUCE_FUSED_PAIRS:
        raise TypeError(f"x dtype {x.dtype} with fp8_format {fp8_format!r} is not supported")
    if out is not None:
        checks.tensor("out", out, (out_dtype,), ndim=2)
        if tuple(out.shape) != (t, h) or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous [{t}, {h}] {out_dtype} tensor, got {tuple(out.shape)}")
    for name, v in (("token_topk_to_pos", token_topk_to_pos), ("topk_weights", topk_weights), ("x[1] (x_sf)", x_sf),
                    ("sf", sf), ("out", out)):
        if v is not None:
            checks.same_device(name, v, "x", x)
    return x, x_sf, out_dtype


def reduce_fused(x, topk_weights, token_topk_to_pos, fp8_format="", sf=None, out=None):
    x, x_sf, out_dtype = check_reduce(x, topk_weights, token_topk_to_pos, fp8_format, sf, out)
    t, k = token_topk_to_pos.shape
    n, h = x.shape
    if out is None:
        out = torch.empty((t, h), dtype=out_dtype, device=x.device)
    if t == 0:
        return out
    checks.cuda("x", x)
    ve = 16 // x.element_size()
    launch(RED_CONTRACT, RED_CONTRACT.key(in_dtype=RED_DTYPES[x.dtype], out_dtype=RED_DTYPES[out_dtype]), x.device,
           x=x.data_ptr(), topk_weights=0 if topk_weights is None else topk_weights.data_ptr(),
           token_topk_to_pos=token_topk_to_pos.data_ptr(), out=out.data_ptr(), sf=0 if sf is None else sf.data_ptr(),
           x_sf=0 if x_sf is None else x_sf.data_ptr(), num_tokens=t, num_topk=k, num_expanded=n,
           hidden_chunks=h // ve, has_weights=int(topk_weights is not None), has_x_sf=int(x_sf is not None),
           has_sf=int(sf is not None))
    return out
