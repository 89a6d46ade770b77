"""TileLang kernel definitions, one module per operator. Build time only.

Each module defines OP, PARAM_NAMES, PASS_CONFIGS, ``invalid_reason(params)``
(importable without TileLang) and ``build(params, arch) -> PrimFunc``.
"""
