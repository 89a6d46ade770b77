"""``torch.ops.tilekiln.<op>`` right after ``import tilekiln``.

The op families register their torch.library ops when they are imported, and they are imported lazily:
a first call pays only for its own family (importing all three took 56-70 ms on the CPU build machine).
So that a graph or a script that names ``torch.ops.tilekiln.topk_gate`` still finds it, ``import tilekiln``
installs a namespace object that imports the owning family on the first lookup of one of its ops.
tests/runtime/test_torch_ops_namespace.py keeps OP_FAMILY equal to the ops the families register.
"""
import importlib
import sys

import torch
from torch._ops import _OpNamespace  # the class of torch.ops.<namespace> (torch >= 2.4)

NAMESPACE = "tilekiln"
_QUANT, _MOE, _TRANSPOSE = "tilekiln.quant", "tilekiln.moe", "tilekiln.transpose"
OP_FAMILY = {
    **dict.fromkeys((
        "per_token_cast", "per_token_cast_requant", "per_block_cast", "per_channel_cast", "cast", "cast_back",
        "per_channel_cast_and_transpose", "swiglu_forward", "swiglu_forward_and_per_token_cast",
        "swiglu_backward", "swiglu_backward_and_per_token_cast", "swiglu_forward_and_per_channel_cast_and_transpose",
        "norm_forward"), _QUANT),
    **dict.fromkeys((
        "topk_gate", "normalize_weight", "top2_sum_gate", "topk_sum_and_topk_group_idx", "moe_topk_gate_forward",
        "moe_topk_gate_backward", "group_count", "aux_fi", "mask_indices_by_tp", "inplace_unique_group_indices"), _MOE),
    **dict.fromkeys(("transpose", "batched_transpose"), _TRANSPOSE),
}


class _FamilyImportingNamespace(_OpNamespace):
    # _OpNamespace names each op's module after the class's module; torch.compile's code generation
    # finds ops again by that name, so it must be torch.ops.tilekiln as for a plain namespace.
    __module__ = "torch.ops"

    def __getattr__(self, op_name):
        family = OP_FAMILY.get(op_name)
        if family is not None and family not in sys.modules:
            importlib.import_module(family)  # registers the family's ops
        return super().__getattr__(op_name)


def install():
    if not isinstance(torch.ops.__dict__.get(NAMESPACE), _FamilyImportingNamespace):
        setattr(torch.ops, NAMESPACE, _FamilyImportingNamespace(NAMESPACE))
