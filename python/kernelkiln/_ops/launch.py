"""Launches from an op's point of view: the variant by its contract's parameters, the arguments by name.

``kernel(contract, values, device_index)`` is the store's CompiledKernel of the variant ``values`` (a tuple in the
contract's parameter order, e.g. from ``contract.variant(...)``). ``launch(contract, values, device, **args)``
launches it with the arguments named as the kernel's PrimFunc names them (the launch spec the build extracted from
the IR): a call builds its keyword arguments and one itemgetter puts them in PrimFunc order, about 1 us more than a
hand-written tuple on the CPU stand-in (benchmarks/results/2026-12-02-64c5a004d8/extra/host). Launch plans, the
repeated calls' path, bind by name once, when the plan is built (``CompiledKernel.bound_launcher_named``).
"""
import torch

from kernelkiln import config
from kernelkiln._runtime import store

try:  # the raw-stream accessor compilers use: ~0.1 us instead of ~7 us for current_stream()
    raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - older/newer torch without the private accessor
    def raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def kernel(contract, values, device_index):
    return store().kernel(contract.op, contract.param_names, values, device_index)


def has_variant(contract, values, device_index):
    return store().has_variant(contract.op, contract.param_names, values, device_index)


def launch(contract, values, device, **args):
    """Launch the variant ``values`` of ``contract``'s op on ``device`` with the launch arguments ``args`` (data
    pointers as ints), every one of the kernel's named once."""
    index = device.index
    k = store().kernel(contract.op, contract.param_names, values, index)
    k.launch(index, raw_stream(index), k.bind_named(args), pdl=config.get_pdl())
