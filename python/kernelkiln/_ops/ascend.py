"""Ascend launches from an op's point of view: the NPU twin of kernelkiln._ops.launch.

An op with Ascend kernels checks its arguments once for both backends; where ``checks.backend`` says its tensors are
on an NPU, it calls its Ascend path, which launches with ``launch(contract, values, device, **args)``: ``values`` are
the compile-time values of the op's Ascend declaration (``contract.ascend``, its own parameters and argument names;
docs/ASCEND.md "Store format"), ``args`` the Ascend kernel's launch arguments by name. ``num_cores``, the block dim of
the persistent Ascend kernels, is filled in here when the op leaves it out: never more cores than work items, never
more than the device has of the kind the kernel runs on (``config.ascend_cores``).

Nothing here opens the CANN runtime or imports torch_npu before an NPU call: importing an op never needs either.
"""
from kernelkiln import config
from kernelkiln._runtime import ascend as ascend_runtime


def declaration(contract):
    """The op's Ascend declaration, or a clear error for an op without Ascend kernels."""
    asc = getattr(contract, "ascend", None)
    if asc is None:
        raise ValueError(f"{contract.op} has no Ascend (NPU) kernel in KernelKiln; it needs CUDA tensors")
    return asc


def variant(contract, **facts):
    """The Ascend compile-time values of a call: each parameter of the op's Ascend declaration taken from ``facts``
    (what the op knows of the call, by the parameters' names; names the declaration lacks are not used), defaults
    for the rest; a ``ValueError`` names what cannot be built."""
    asc = declaration(contract)
    return asc.variant(**{n: facts[n] for n in asc.param_names if n in facts})


def npu_stream(index):
    """The aclrtStream handle of torch_npu's current stream on NPU ``index``."""
    return config.require_npu("an Ascend kernel launch").current_stream(index).npu_stream


def device_index(device):
    return device.index if device.index is not None else config.npu_current_device()


def kernel(contract, values, device_index):
    return ascend_runtime.store().kernel(contract.op, declaration(contract).param_names, values, device_index)


def launch(contract, values, device, **args):
    """Launch the Ascend variant ``values`` of ``contract``'s op on NPU ``device`` on torch_npu's current stream. ``args``
    names the call's values (data pointers as ints, sizes, leading dimensions, options); the kernel takes those its
    launch spec names, and a name it needs that ``args`` lacks is an error."""
    index = device_index(device)
    k = kernel(contract, values, index)
    stream = npu_stream(index)
    if "num_cores" in k.arg_names and "num_cores" not in args:
        args["num_cores"] = 0  # read by nothing below: work items never depend on the core count
        args["num_cores"] = k.num_cores(k.bind_from(args), config.ascend_cores(k.core_type, index))
    k.launch(index, stream, k.bind_from(args))
