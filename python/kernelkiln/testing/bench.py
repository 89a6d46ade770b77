"""Benchmark and test-id helpers (the peer's ``tile_kernels.testing.bench``): output suppression around noisy
compiles, the cast parameters of a parameter dict, and the ``name=value,`` test ids (optionally padded to fixed
widths so a table of ids lines up)."""
import os
import sys


class empty_suppress:
    """A context manager that does nothing (the stand-in for ``suppress_stdout_stderr`` when output is wanted)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None


class suppress_stdout_stderr:
    """Silence stdout and stderr inside the block, at the file-descriptor level too (so output of C/C++ code and
    subprocesses goes to the null device), restoring both on exit."""

    def __enter__(self):
        self._saved_streams = (sys.stdout, sys.stderr)
        self._null_out = open(os.devnull, "w")
        self._null_err = open(os.devnull, "w")
        self._fd_saves = []  # (the stream's fd, a duplicate of what it pointed at)
        for stream, null in ((sys.stdout, self._null_out), (sys.stderr, self._null_err)):
            try:
                fd = stream.fileno()
            except (AttributeError, OSError, ValueError):  # e.g. an in-memory stream: swap the object only
                continue
            stream.flush()
            self._fd_saves.append((fd, os.dup(fd)))
            os.dup2(null.fileno(), fd)
        sys.stdout, sys.stderr = self._null_out, self._null_err
        return self

    def __exit__(self, *exc_info):
        sys.stdout, sys.stderr = self._saved_streams
        for fd, saved in self._fd_saves:
            os.dup2(saved, fd)
            os.close(saved)
        self._null_out.close()
        self._null_err.close()
        return None


_CAST_PARAM_KEYS = ("round_sf", "use_packed_ue8m0", "use_tma_aligned_col_major_sf")


def get_cast_params(params: dict) -> dict:
    """The scale-factor layout arguments of a cast found in ``params`` (``round_sf``, ``use_packed_ue8m0``,
    ``use_tma_aligned_col_major_sf``), in that order."""
    return {k: params[k] for k in _CAST_PARAM_KEYS if k in params}


# Parameter names shortened in test ids.
_SHORT_NAME = {
    "num_ep_ranks": "ep",
    "num_experts": "experts",
    "use_tma_aligned_col_major_sf": "col",
    "use_packed_ue8m0": "ue8m0",
    "use_e4m3_sf": "e4m3sf",
    "round_sf": "round",
}
_LONG_NAME = {short: long for long, short in _SHORT_NAME.items()}

# The value widths of display ids, by (long) parameter name; a bool value takes 5 ("False").
_DISPLAY_WIDTH = {
    "num_tokens": 5,
    "num_ep_ranks": 2,
    "num_experts": 3,
    "hidden": 4,
    "use_tma_aligned_col_major_sf": 1,
    "use_packed_ue8m0": 1,
    "use_e4m3_sf": 1,
    "round_sf": 1,
    "num_per_channels": 4,
    "numel": 9,
    "num_rows": 7,
    "head_dim": 3,
    "nesterov": 5,
}


def _field(name: str, value: str, display: bool) -> str:
    text = f"{name}={value},"
    if display:
        width = _DISPLAY_WIDTH.get(_LONG_NAME.get(name, name))
        if width is not None:
            if value in ("True", "False"):
                width = 5
            text = text.ljust(len(name) + max(width, len(value)) + 2)
    return text


def make_param_id(params: dict, display: bool = False) -> str:
    """A test id of ``params``: ``name=value,`` per parameter that is not None, with the short names of
    ``_SHORT_NAME``; ``display`` pads the known parameters' fields to fixed widths."""
    return "".join(_field(_SHORT_NAME.get(k, k), str(v), display) for k, v in params.items() if v is not None)


def format_param_id(param_id: str, display: bool = False) -> str:
    """Re-render a comma-separated test id: ``name=value`` fields as ``make_param_id`` writes them (padded with
    ``display``), bare values (a plain pytest id) kept as they are; every field ends with a comma."""
    out = []
    for part in param_id.split(","):
        if not part:
            continue
        name, eq, value = part.partition("=")
        out.append(_field(name, value, display) if eq else part + ",")
    return "".join(out)
