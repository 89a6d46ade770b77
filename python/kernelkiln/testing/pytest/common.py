"""What the plugins of this package share (not a plugin itself): the tests root, the refresh merge mode, the JSONL
files they read and write, and the temporary output file one pytest run shares with its xdist workers.

Environment:

* ``TK_TESTS_DIR`` (or the older ``TK_BENCHMARK_TESTS_DIR``): the tests root. Records name their test file relative
  to it, and that relative path names the shard a record is stored in; tests outside it are not recorded.
* ``TK_TEST_MERGE_MODE``: how a refresh (``--refresh-baseline``, ``--refresh-mem``) merges this run into the shards:
  ``replace`` (default) replaces the entries measured now and keeps the rest; ``overwrite`` rewrites each shard this
  run touched with only this run's entries (dropping those of deleted tests); ``fill`` adds missing entries only.
"""

import json
import os
import tempfile

import pytest

MERGE_MODES = ("overwrite", "replace", "fill")
_DEFAULT_MERGE_MODE = "replace"


def get_tests_dir():
    """The tests root from the environment, or None when neither variable is set."""
    return os.environ.get("TK_TESTS_DIR") or os.environ.get("TK_BENCHMARK_TESTS_DIR")


def item_source_file(item):
    """The item's file relative to the tests root, or None: without a tests root, without a path, or for a file
    outside the root (a repository-wide conftest may load the plugins for other tests too; a ``../`` name would put
    their shards outside the data directory)."""
    path = getattr(item, "path", None) or getattr(item, "fspath", None)
    root = get_tests_dir()
    if path is None or not root:
        return None
    rel = os.path.relpath(os.path.abspath(str(path)), os.path.abspath(root))
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return rel


def _merge_mode_setting():
    return os.environ.get("TK_TEST_MERGE_MODE", "").strip().lower()


def merge_mode():
    """The refresh merge mode of ``TK_TEST_MERGE_MODE``; unset or unknown means ``replace`` (a refresh run checks the
    value up front with ``validate_merge_mode``, so an unknown one never gets this far there)."""
    mode = _merge_mode_setting()
    return mode if mode in MERGE_MODES else _DEFAULT_MERGE_MODE


def validate_merge_mode():
    """Refuse an unknown ``TK_TEST_MERGE_MODE`` before a refresh writes anything."""
    mode = _merge_mode_setting()
    if mode and mode not in MERGE_MODES:
        raise pytest.UsageError(
            f"unknown TK_TEST_MERGE_MODE {os.environ['TK_TEST_MERGE_MODE']!r}; expected one of: {', '.join(MERGE_MODES)}"
        )


def is_xdist_worker(config):
    """True in a pytest-xdist worker process (xdist gives its workers' configs ``workerinput``)."""
    return hasattr(config, "workerinput")


def is_xdist_controller(config):
    """True in the process that hands tests to xdist workers and runs none itself."""
    return bool(getattr(config.option, "numprocesses", None)) and not is_xdist_worker(config)


def shared_output_file(env_name, prefix):
    """A JSONL file for the records of this run and its xdist workers: ``(path, created)``.

    The first process makes a temporary file and publishes its path in ``env_name``; workers start after that and
    inherit the environment, so every process appends to the same file and the controller reads it at the end."""
    path = os.environ.get(env_name)
    if path:
        return path, False
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".jsonl")
    os.close(fd)
    os.environ[env_name] = path
    return path, True


def release_shared_output_file(env_name, path):
    """Undo ``shared_output_file`` in the process that created the file, so a later session in this process (e.g.
    pytester's in-process runs) starts from an empty one."""
    if os.environ.get(env_name) == path:
        del os.environ[env_name]
    try:
        os.remove(path)
    except OSError:
        pass


def read_jsonl(path, skip_bad_lines=False):
    """The records of a JSONL file (blank lines skipped); [] when it does not exist. ``skip_bad_lines`` drops lines
    that do not parse (a line cut off by a crashed worker)."""
    if not path or not os.path.exists(path):
        return []
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if not skip_bad_lines:
                    raise
    return records


def _line(record):
    # The peer's serialization (default separators, non-ASCII kept), so shards written by either package diff cleanly.
    return json.dumps(record, ensure_ascii=False) + "\n"


def append_jsonl(path, record):
    """Append one record as one write: xdist workers append to the same file, and a single short write in append
    mode does not interleave with another process's."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(_line(record))


def write_jsonl(path, records):
    """Replace ``path`` by the records, through a temporary file and a rename (never a half-written shard)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(_line(r) for r in records)
    os.replace(tmp, path)


def jsonl_files(directory):
    """``(path, path relative to directory)`` of every ``*.jsonl`` under ``directory``, in a stable order."""
    if not directory or not os.path.isdir(directory):
        return
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".jsonl"):
                path = os.path.join(dirpath, name)
                yield path, os.path.relpath(path, directory)


def shard_path(directory, source_file):
    """The shard of a test file: ``quant/test_x.py`` -> ``<directory>/quant/test_x.jsonl``."""
    stem = source_file[: -len(".py")] + ".jsonl" if source_file.endswith(".py") else source_file
    return os.path.join(directory, stem)


def cuda_available():
    """Whether torch sees a CUDA device (False on a CPU-only torch build)."""
    import torch

    return torch.cuda.is_available()
