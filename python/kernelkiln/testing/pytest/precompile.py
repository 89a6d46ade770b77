"""The ``TK_PRECOMPILE=1`` pass of the peer's ``tile_kernels.testing.pytest.precompile``, for prebuilt kernels.

The peer JIT-compiles its kernels on first use and runs a warm-up pass over the token-shaped tests with
``TK_PRECOMPILE=1`` to fill its compile cache before the real run. KernelKiln's kernels are compiled ahead of time and
ship in the wheel, so there is nothing to compile and no cache to fill. What this plugin does, with
``TK_PRECOMPILE=1`` (otherwise nothing):

* it keeps the peer's selection, so a pipeline that runs the pass sees the same tests: only parametrized tests
  whose parameters (at any depth of dicts, lists and tuples) hold ``num_tokens``, ``num_expanded_tokens`` or
  ``num_send_tokens`` run; the rest are deselected;
* where a CUDA device is present it loads every prebuilt kernel for this GPU's arch once at the end of collection
  (``kernelkiln.preload()``: each cubin's sha256 is checked and the driver loads it), so a store that cannot run
  here shows up before the first test, and the terminal summary says how many variants it loaded. An xdist
  controller, which runs no tests, and ``--collect-only`` skip the preload; so does a machine without a CUDA device.

It has no command-line options (the peer's has none). A preload error is reported in the summary, not raised: the
tests that need the kernel then fail with the loader's own error.
"""

import os
from collections.abc import Mapping

import pytest

from kernelkiln.testing.pytest import common

# Parameter names that mark a test as token-shaped: it builds inputs from a token count (num_send_tokens: MoE tests
# that derive their token count from the tokens sent).
_TOKEN_KEYS = ("num_tokens", "num_expanded_tokens", "num_send_tokens")
_PRELOAD = pytest.StashKey[str]()  # what the preload did, for the summary


def _enabled():
    return os.getenv("TK_PRECOMPILE", "0") == "1"


def _has_token_shape(value):
    """Whether ``value`` (a test's parameters) names a token count anywhere inside its dicts, lists and tuples."""
    if isinstance(value, Mapping):
        return any(k in value for k in _TOKEN_KEYS) or any(_has_token_shape(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_token_shape(v) for v in value)
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if not _enabled():
        return
    selected, deselected = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        (selected if callspec is not None and _has_token_shape(callspec.params) else deselected).append(item)
    items[:] = selected
    if deselected:
        config.hook.pytest_deselected(items=deselected)


def _preload():
    """One line for the summary: what was loaded, or why nothing was."""
    if not common.cuda_available():
        return "no CUDA device: nothing preloaded (the kernels are prebuilt; there is nothing to compile)"
    import kernelkiln

    try:
        count = kernelkiln.preload()
    except Exception as e:  # noqa: BLE001 - reported, not raised: the tests show the loader's error where it matters
        return f"preloading the prebuilt kernels failed: {type(e).__name__}: {e}"
    return f"{count} prebuilt kernel variant(s) loaded on this GPU (ahead-of-time compiled: nothing to compile)"


def pytest_collection_finish(session):
    config = session.config
    if _enabled() and not config.option.collectonly and not common.is_xdist_controller(config):
        config.stash[_PRELOAD] = _preload()


def pytest_terminal_summary(terminalreporter, config):
    if _PRELOAD in config.stash:
        terminalreporter.write_sep("-", "KernelKiln precompile pass (TK_PRECOMPILE=1)")
        terminalreporter.write_line(config.stash[_PRELOAD])
