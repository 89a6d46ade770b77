"""A stand-in Ascend NPU device for the CPU tests: torch tensors whose device type is "npu", backed by CPU memory.

It stands in for torch_npu, and only for what KernelKiln's host code touches: torch's PrivateUse1 backend renamed
to "npu" (what torch_npu does; torch's helper for Python backends adds the device guard and hooks), a ``torch.npu``
module with ``current_device``, ``current_stream`` (whose ``npu_stream`` is a fixed fake handle), ``device_count``
and ``is_available``, and an allocator: ``torch.empty(..., device="npu:i")`` and every op on those tensors run on
CPU tensors behind them, so ``data_ptr()`` gives real host addresses (the launch records can be matched against
them). No kernel runs: the ACL stand-in (tests/acl_standin.py) only records launches. The tensors are a subclass of
torch.Tensor (torch_npu's are plain torch.Tensor objects), so code that tests ``type(x) is torch.Tensor`` sees a
difference; ``as_plain_tensors`` hides it from one module.

``install()`` renames the PrivateUse1 backend, which torch allows once per process and cannot undo: use it only in
a subprocess (``run_script``), never in the pytest process.
"""
import json
import subprocess
import sys
import types
from pathlib import Path

FAKE_STREAM = 0x5712EA40  # torch.npu.current_stream().npu_stream of the stand-in


def install(device_count=2):
    import torch
    from torch.utils._pytree import tree_map


    class NpuTensor(torch.Tensor):
        """A tensor on the stand-in NPU: shape, strides and dtype of its CPU ``backing``, device npu:index."""

        @staticmethod
        def __new__(cls, backing, index=0):
            t = torch.Tensor._make_wrapper_subclass(
                cls, backing.shape, strides=backing.stride(), storage_offset=backing.storage_offset(),
                dtype=backing.dtype, device=torch.device("npu", index), requires_grad=backing.requires_grad)
            t.backing, t.index = backing, index
            return t

        def data_ptr(self):
            return self.backing.data_ptr()

        def __repr__(self):
            return f"NpuTensor(npu:{self.index}, {tuple(self.shape)}, {self.dtype})"

        @classmethod
        def __torch_dispatch__(cls, func, types_, args=(), kwargs=None):
            index = next((a.index for a in (*args, *(kwargs or {}).values()) if isinstance(a, NpuTensor)), 0)

            def unwrap(x):
                if isinstance(x, NpuTensor):
                    return x.backing
                if isinstance(x, torch.device) and x.type == "npu":
                    return torch.device("cpu")
                return x

            target = (kwargs or {}).get("device")
            out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
            if isinstance(target, torch.device) and target.type == "cpu":
                return out  # a copy to the host (tensor.cpu()): a plain CPU tensor
            return tree_map(lambda x: NpuTensor(x, index) if isinstance(x, torch.Tensor) else x, out)

    def factory(op):
        def impl(*args, device=None, **kwargs):
            kwargs.pop("pin_memory", None)
            return NpuTensor(op(*args, device="cpu", **kwargs), (device.index or 0) if device is not None else 0)
        return impl

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", factory(torch.empty), "PrivateUse1")
    lib.impl("empty_strided", factory(torch.empty_strided), "PrivateUse1")
    install.library = lib  # kept alive: the registrations last as long as the Library object

    npu = types.ModuleType("torch.npu")
    state = {"device": 0}
    npu.is_available = lambda: True
    npu.device_count = lambda: device_count
    npu.current_device = lambda: state["device"]
    npu.set_device = lambda d: state.__setitem__("device", d if isinstance(d, int) else torch.device(d).index)
    npu._is_in_bad_fork = lambda: False
    npu.manual_seed_all = lambda seed: None

    class _Stream:
        def __init__(self, index):
            self.npu_stream = FAKE_STREAM + (index or 0)

    npu.current_stream = lambda device=None: _Stream(device if isinstance(device, int) else state["device"])
    # the rename, torch's device guard and hooks for a Python backend, and torch.npu (torch's own helper for this)
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    _setup_privateuseone_for_python_backend(rename="npu", backend_module=npu)
    return NpuTensor


def run_script(body, env=None, timeout=120):
    """Run ``body`` (Python source) in a fresh interpreter with the source tree and tests/ on sys.path; it prints one
    JSON document as its last line, which is returned."""
    tests = Path(__file__).resolve().parent
    prelude = (f"import sys, json\nsys.path[:0] = [{str(tests.parent / 'python')!r}, {str(tests)!r}]\n")
    import os
    full_env = dict(os.environ, **(env or {}))
    r = subprocess.run([sys.executable, "-c", prelude + body], capture_output=True, text=True, timeout=timeout,
                       env=full_env)
    if r.returncode != 0:
        raise AssertionError(f"stand-in NPU script failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def as_plain_tensors(module, tensor_class):
    """Make ``type(x) is torch.Tensor`` true in ``module`` for the stand-in's tensors, as it is for torch_npu's: the
    module's ``torch`` becomes a view of torch whose ``Tensor`` is the stand-in class (everything else is torch's)."""
    import torch

    class _Torch:
        Tensor = tensor_class

        def __getattr__(self, name):
            return getattr(torch, name)

    module.torch = _Torch()
