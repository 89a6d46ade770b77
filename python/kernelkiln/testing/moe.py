"""MoE router test inputs (the peer's ``tile_kernels.testing.moe``): router logits whose top-k choice is stable,
i.e. no token's k-th and (k+1)-th biased score are within 1e-6 of each other, so the kernel and the reference
cannot pick different experts through rounding."""
import torch

from kernelkiln import config

_MIN_GAP = 1e-6
_MAX_REDRAWS = 100


def _sqrt_softplus(x):
    """The router's score sqrt(softplus(x)) in fp32; on Ascend computed in fp64 and rounded once, as the peer's
    reference does there."""
    if not config.is_ascend():
        return torch.nn.functional.softplus(x).sqrt()
    x64 = x.detach().cpu().double()
    s = (x64.clamp(min=0.0) + torch.log1p(torch.exp(-x64.abs()))).sqrt()
    return s.to(device=x.device, dtype=x.dtype)


def construct_logits(params: dict, kwargs: dict) -> torch.Tensor:
    """fp32 logits ``[num_seqs * (num_tokens + num_padded_tokens), num_routed_experts]`` of standard normal samples
    (``num_seqs`` defaults to 1), redrawing the rows whose biased scores have an unstable top-``num_topk`` boundary.

    ``kwargs`` holds the router's ``bias`` (``[num_routed_experts]`` or None: zeros), ``image_token_mask`` (bool per
    token, or None) and, with a mask, ``image_bias``, the bias of the image tokens. Raises RuntimeError when 100
    redraws leave a row unstable.
    """
    from kernelkiln.rand import randn
    device = config.get_device()
    rows = params.get("num_seqs", 1) * (params["num_tokens"] + params["num_padded_tokens"])
    experts = params["num_routed_experts"]
    k = params["num_topk"]
    bias = kwargs["bias"]
    logits = randn((rows, experts), dtype=torch.float, device=device)

    if bias is None:
        bias = torch.zeros(experts, dtype=torch.float32, device=device)
    image_mask = kwargs["image_token_mask"]
    if image_mask is not None:
        bias = torch.where(image_mask.unsqueeze(-1), kwargs["image_bias"].unsqueeze(0), bias.unsqueeze(0))
    else:
        bias = bias.unsqueeze(0).expand(rows, experts)

    scores = _sqrt_softplus(logits) + bias
    for _ in range(_MAX_REDRAWS):
        top = torch.topk(scores, k + 1, dim=-1).values
        unstable = top[:, k - 1] - top[:, k] <= _MIN_GAP
        if not unstable.any():
            return logits
        logits[unstable] = randn((int(unstable.sum()), experts), dtype=torch.float, device=device)
        scores[unstable] = _sqrt_softplus(logits[unstable]) + bias[unstable]
    raise RuntimeError(f"construct_logits: {_MAX_REDRAWS} redraws left rows whose top-{k} boundary is within "
                       f"{_MIN_GAP} of the next score")
