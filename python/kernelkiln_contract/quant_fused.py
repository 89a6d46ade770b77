"""Contracts of the fused quantization (RMSNorm, SwiGLU, per-channel) ops."""

CONTRACTS = ()
