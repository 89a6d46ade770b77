"""Benchmark plugin: run benchmark tests on request, record their timings, compare them with stored baselines.

Load it by name (``pytest_plugins = ["kernelkiln.testing.pytest.benchmark"]``); it is the counterpart of the peer's
``tile_kernels.testing.pytest.benchmark`` with the same options, marker, fixtures, environment and files.

Options:

* ``--run-benchmark``: run tests marked ``benchmark`` (they are skipped otherwise), beside the other tests selected;
  add ``-m benchmark`` for the benchmarks alone.
* ``--benchmark-output PATH``: append each record to PATH as one JSON line. Without it, ``--run-benchmark`` uses a
  temporary file shared with xdist workers (removed at the end of the run).
* ``--benchmark-verbose``: the report shows the records' ``extras`` columns too.
* ``-K EXPR`` / ``--key-filter EXPR`` (repeatable): keep only tests whose node id matches one of the expressions:
  regular expressions (searched in the node id) joined by ``and`` (or just adjacent), ``or`` and ``not``, without
  parentheses; quote a regex that contains spaces.
* ``--refresh-baseline``: write this run's records into the baseline shards (needs ``--run-benchmark``; runs only
  benchmark tests, ``-m`` narrows that further). The merge follows ``TK_TEST_MERGE_MODE`` (see ``common``).

Environment: ``TK_BENCHMARK_BASELINES_DIR`` (else ``$TK_TESTS_DIR/benchmark_baselines``), ``TK_TESTS_DIR``;
``TK_BENCHMARK_REGRESSION_THRESHOLD`` (relative, default 0.05) and ``TK_BENCHMARK_MIN_DELTA_US`` (default 0.8): a
record is a regression when it is slower than its baseline by more than both, an improvement when faster by both;
``TK_BENCHMARK_FAIL_MODE``: what turns a passing run's exit code into 1: ``regression`` (default), ``missing`` (a
record without a baseline), ``missing-regression`` (either) or ``none``. A run that already failed, and a refresh
run, keep their exit code.

Files: the baselines are one JSONL shard per test file (``tests/quant/test_x.py`` -> ``quant/test_x.jsonl``), a
record per line as ``benchmark_record`` writes it minus ``source_file``, sorted by key
``kernel/operation[param_id]`` (or ``[k=v,...]`` of the sorted params where the test is not parametrized).

Differences from the peer: ``benchmark_timer`` times with KernelKiln's CUDA-graph timer (``timing.device_time_us``)
instead of tilelang's ``do_bench`` with CUPTI (no tilelang at run time), so the peer's baselines are readable but
are not a reference for our timings (refresh them); it skips, with the reason, where torch sees no CUDA device.
``--refresh-baseline`` without a baselines directory is a usage error up front (the peer fails at the end).
"""

import dataclasses
import math
import os
import re
import shlex
import threading
import warnings

import pytest

from kernelkiln.testing.bench import format_param_id, make_param_id
from kernelkiln.testing.pytest import common

_OUTPUT_ENV = "_TK_BENCHMARK_OUTPUT"  # the shared temporary output file, for xdist workers (the peer's name)
_DEFAULT_THRESHOLD = 0.05
_DEFAULT_MIN_DELTA_US = 0.8
_FAIL_MODES = ("regression", "missing", "missing-regression", "none")


# --- settings -------------------------------------------------------------------------------------------------------


def _threshold():
    return float(os.environ.get("TK_BENCHMARK_REGRESSION_THRESHOLD", _DEFAULT_THRESHOLD))


def _min_delta_us():
    return float(os.environ.get("TK_BENCHMARK_MIN_DELTA_US", _DEFAULT_MIN_DELTA_US))


def _fail_mode():
    return os.environ.get("TK_BENCHMARK_FAIL_MODE", "regression").strip().lower()


def _baselines_dir(config):
    explicit = os.environ.get("TK_BENCHMARK_BASELINES_DIR", "")
    if explicit:
        return explicit
    tests_dir = common.get_tests_dir()
    return os.path.join(tests_dir, "benchmark_baselines") if tests_dir else None


@dataclasses.dataclass
class _Comparison:
    """This run's records against the baselines; each regression/improvement is (key, record, base_us, cur_us,
    ratio), each missing entry (key, cur_us)."""

    records: list
    baselines: dict
    regressions: list
    improvements: list
    missing: list


@dataclasses.dataclass
class _RunState:
    """What one session keeps (in ``config.stash``; the peer hangs attributes on the config)."""

    output: str | None
    own_output: bool
    key_filters: list
    records: list = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    baselines: dict | None = None
    comparison: _Comparison | None = None
    update: dict | None = None


_STATE = pytest.StashKey[_RunState]()


def _state(config):
    return config.stash[_STATE]


# --- options, marker, selection -------------------------------------------------------------------------------------


def pytest_addoption(parser):
    parser.addoption(
        "--run-benchmark", action="store_true", default=False, help="Run the tests marked benchmark (skipped without this option)"
    )
    parser.addoption(
        "--benchmark-output", default=None, help="Append each benchmark record to this file as one JSON object per line (JSONL)"
    )
    parser.addoption(
        "--benchmark-verbose",
        action="store_true",
        default=False,
        help="Show the records' extras (speedup, ...) as columns of the benchmark regression report",
    )
    parser.addoption(
        "-K",
        "--key-filter",
        action="append",
        default=[],
        help="Run only node IDs matching this expression of regexes joined by and/or/not; repeat for alternatives",
    )
    parser.addoption(
        "--refresh-baseline",
        action="store_true",
        default=False,
        help="Write this run's benchmark records into the baselines directory (needs --run-benchmark; runs only benchmark tests)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "benchmark: a benchmark test (skipped unless --run-benchmark is given)")
    key_filters = _compile_key_filters(config.getoption("--key-filter", default=None) or [])
    run = config.getoption("--run-benchmark", default=False)
    if config.getoption("--refresh-baseline", default=False):
        _prepare_refresh(config, run)
    output, own = config.getoption("--benchmark-output", default=None), False
    if run and output is None:
        output, own = common.shared_output_file(_OUTPUT_ENV, "tk_bench_")
        config.option.benchmark_output = output  # conftests reading the option see the file in use
    config.stash[_STATE] = _RunState(
        output=output, own_output=own and not common.is_xdist_worker(config), key_filters=key_filters
    )


def _prepare_refresh(config, run):
    if not run:
        raise pytest.UsageError("--refresh-baseline requires --run-benchmark")
    common.validate_merge_mode()
    if not _baselines_dir(config):
        raise pytest.UsageError("--refresh-baseline needs a baselines directory: set TK_BENCHMARK_BASELINES_DIR or TK_TESTS_DIR")
    # A refresh only updates baselines: run the benchmarks alone, within the user's own -m expression.
    user_expr = getattr(config.option, "markexpr", "") or ""
    config.option.markexpr = f"benchmark and ({user_expr})" if user_expr else "benchmark"


def pytest_unconfigure(config):
    state = config.stash.get(_STATE, None)
    if state is not None and state.own_output:
        common.release_shared_output_file(_OUTPUT_ENV, state.output)


def pytest_collection_modifyitems(config, items):
    filters = _state(config).key_filters
    if filters:
        kept = [item for item in items if any(matches(item.nodeid) for matches in filters)]
        if len(kept) < len(items):
            dropped = [item for item in items if not any(matches(item.nodeid) for matches in filters)]
            items[:] = kept
            config.hook.pytest_deselected(items=dropped)
    if not config.getoption("--run-benchmark"):
        skip = pytest.mark.skip(reason="need --run-benchmark to run")
        for item in items:
            if "benchmark" in item.keywords:
                item.add_marker(skip)


# --- -K expressions -------------------------------------------------------------------------------------------------


def _compile_key_filters(expressions):
    try:
        return [_compile_key_filter(e) for e in expressions]
    except ValueError as e:  # shlex's unclosed quote is a ValueError too
        raise pytest.UsageError(str(e)) from e


def _key_filter_tokens(expression):
    """Whitespace-separated words; a word in matching quotes loses them (so a regex may hold spaces)."""
    lexer = shlex.shlex(expression, posix=False)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return [t[1:-1] if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"" else t for t in lexer]


def _compile_key_filter(expression):
    """A predicate on node ids. Precedence: ``not`` over ``and`` (or juxtaposition) over ``or``."""
    tokens = _key_filter_tokens(expression)
    if not tokens:
        raise ValueError("-K/--key-filter expression cannot be empty")
    predicate, pos = _parse_or(tokens, 0, expression)
    if pos < len(tokens):
        raise ValueError(f"Unexpected token in -K/--key-filter expression: {tokens[pos]!r}")
    return predicate


def _parse_or(tokens, pos, expression):
    terms = []
    while True:
        term, pos = _parse_and(tokens, pos, expression)
        terms.append(term)
        if pos < len(tokens) and tokens[pos] == "or":
            pos += 1
            continue
        return (terms[0] if len(terms) == 1 else lambda text: any(t(text) for t in terms)), pos


def _parse_and(tokens, pos, expression):
    factors = []
    while True:
        factor, pos = _parse_not(tokens, pos, expression)
        factors.append(factor)
        if pos < len(tokens) and tokens[pos] == "and":
            pos += 1
        elif pos >= len(tokens) or tokens[pos] == "or":
            return (factors[0] if len(factors) == 1 else lambda text: all(f(text) for f in factors)), pos


def _parse_not(tokens, pos, expression):
    if pos < len(tokens) and tokens[pos] == "not":
        inner, pos = _parse_not(tokens, pos + 1, expression)
        return (lambda text: not inner(text)), pos
    if pos >= len(tokens):
        raise ValueError(f"Unexpected end of -K/--key-filter expression: {expression!r}")
    word = tokens[pos]
    if word in ("and", "or"):
        raise ValueError(f"Expected regex before {word!r} in -K/--key-filter expression")
    try:
        pattern = re.compile(word)
    except re.error as e:
        raise ValueError(f"Invalid regex in -K/--key-filter expression {word!r}: {e}") from e
    return (lambda text: pattern.search(text) is not None), pos + 1


# --- records and keys -----------------------------------------------------------------------------------------------


def _record_key(record):
    """The baseline key: the pytest parametrize id where there is one, else the sorted params (the record stores
    ``param_id``, so the key rebuilds the same from a baseline file)."""
    head = f"{record['kernel']}/{record['operation']}"
    if record.get("param_id"):
        return f"{head}[{record['param_id']}]"
    params = record.get("params")
    if params:
        return head + "[" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) + "]"
    return f"{head}[None]"


def _display_key(record):
    """The key as the report shows it: ids padded to line up, the params beyond the node's id in braces."""
    head = f"{record['kernel']}/{record['operation']}"
    if record.get("param_id"):
        text = f"{head}[{format_param_id(record['param_id'], display=True)}]"
    elif record.get("params"):
        text = f"{head}[{_display_params(record['params'])}]"
    else:
        text = head
    extra = record.get("extra_params")
    return f"{text} {{{_display_params(extra)}}}" if extra else text


def _display_params(params):
    return make_param_id(params, display=True).rstrip().rstrip(",")


def _callspec(node):
    return getattr(node, "callspec", None)


def _params_beyond_node(node, params):
    """The recorded params that the node's ``params`` parametrization does not hold (or holds differently): a test
    that derives values from its parameters records them there, outside the key."""
    callspec = _callspec(node)
    node_params = callspec.params.get("params") if callspec is not None else None
    if not isinstance(node_params, dict) or not params:
        return None
    beyond = {k: v for k, v in params.items() if k not in node_params or node_params[k] != v}
    return beyond or None


def _round_floats(values, digits):
    return {k: round(v, digits) if isinstance(v, float) else v for k, v in values.items()}


def _build_record(node, kernel, operation, params, time_us, bandwidth_gbs, extras):
    callspec = _callspec(node)
    record = {
        "kernel": kernel,
        "operation": operation,
        "params": dict(sorted(params.items())) if params else params,
        "param_id": callspec.id if callspec is not None else None,
        "source_file": common.item_source_file(node),
        "time_us": round(time_us, 2),
    }
    beyond = _params_beyond_node(node, params)
    if beyond:
        record["extra_params"] = beyond
    if bandwidth_gbs is not None:
        record["bandwidth_gbs"] = round(bandwidth_gbs, 4)
    if extras:
        record["extras"] = _round_floats(extras, 4)
        if "bandwidth_gbs" in record["extras"] and "bandwidth_gbs" not in record:
            record["bandwidth_gbs"] = record["extras"]["bandwidth_gbs"]  # a bandwidth given as an extra
    return record


def _summary_line(record, time_us, bandwidth_gbs, extras):
    parts = [f"  BENCH {_display_key(record)}: {time_us:.1f} us"]
    if bandwidth_gbs is not None:
        parts.append(f", bandwidth_gbs={bandwidth_gbs:.2f}")
    for name, value in (extras or {}).items():
        parts.append(f", {name}={value:.2f}" if isinstance(value, float) else f", {name}={value}")
    return "".join(parts)


def _verdict(current_us, baseline_us, threshold, min_delta_us):
    """'regress', 'improve' or 'OK': a change counts when it passes both the relative and the absolute bar (small
    kernels jitter by a large fraction, long ones by many microseconds)."""
    ratio = current_us / baseline_us if baseline_us > 0 else math.inf
    delta_us = current_us - baseline_us
    if ratio > 1.0 + threshold and delta_us >= min_delta_us:
        return "regress"
    if ratio < 1.0 - threshold and -delta_us >= min_delta_us:
        return "improve"
    return "OK"


# --- baseline shards ------------------------------------------------------------------------------------------------


def _load_baseline_shards(directory):
    """``{source_file: {key: record}}``; a record's ``source_file`` is its shard's test file."""
    shards = {}
    for path, rel in common.jsonl_files(directory):
        source_file = rel[: -len(".jsonl")] + ".py"
        shard = shards[source_file] = {}
        for record in common.read_jsonl(path):
            record["source_file"] = source_file
            shard[_record_key(record)] = record
    return shards


def _flatten(shards):
    return {key: record for shard in shards.values() for key, record in shard.items()}


def _session_baselines(config):
    """The baselines as this session found them, read once (a refresh rewrites them only at the very end)."""
    state = _state(config)
    if state.baselines is None:
        state.baselines = _flatten(_load_baseline_shards(_baselines_dir(config)))
    return state.baselines


def _merge_into_shards(shards, records, mode):
    """Merge records into ``shards`` in place by ``mode``; returns (touched source files, counts). Records of tests
    outside the tests root (no ``source_file``) are not stored."""
    incoming = {}
    for record in records:
        if record.get("source_file") is not None:
            incoming.setdefault(record["source_file"], {})[_record_key(record)] = record
    counts = {"num_updated": 0, "num_added": 0, "num_removed": 0}
    for source_file, new in incoming.items():
        old = shards.setdefault(source_file, {})
        if mode == "fill":
            fresh = {k: r for k, r in new.items() if k not in old}
            counts["num_added"] += len(fresh)
            old.update(fresh)
            continue
        # an entry measured again counts as updated, also in overwrite mode, where it is removed and re-added
        counts["num_updated"] += len(new.keys() & old.keys())
        counts["num_added"] += len(new.keys() - old.keys())
        if mode == "overwrite":
            counts["num_removed"] += len(old.keys() - new.keys())
            old.clear()
        old.update(new)
    return set(incoming), counts


def _write_shard(directory, source_file, shard):
    path = common.shard_path(directory, source_file)
    if not shard:
        if os.path.exists(path):
            os.remove(path)
        return
    rows = []
    for key in sorted(shard):
        row = {k: v for k, v in shard[key].items() if k != "source_file"}  # the shard's location says it
        row["time_us"] = round(row["time_us"], 2)
        rows.append(row)
    common.write_jsonl(path, rows)


def _refresh_baselines(config, records):
    directory = _baselines_dir(config)
    mode = common.merge_mode()
    shards = _load_baseline_shards(directory)
    touched, counts = _merge_into_shards(shards, records, mode)
    for source_file in touched:
        _write_shard(directory, source_file, shards[source_file])
    return {"mode": mode, "num_records": len(_flatten(shards)), **counts, "num_shards": len(touched), "path": directory}


# --- end of session: comparison, refresh, exit code ----------------------------------------------------------------


def _run_records(config):
    """This process's records, or (in an xdist controller, which runs no tests) the shared output file's."""
    state = _state(config)
    return list(state.records) or common.read_jsonl(state.output)


def _compare(config):
    records = _run_records(config)
    if not records:
        return None
    baselines = _session_baselines(config)
    threshold, min_delta_us = _threshold(), _min_delta_us()
    comparison = _Comparison(records, baselines, [], [], [])
    for record in records:
        key = _record_key(record)
        if key not in baselines:
            comparison.missing.append((key, record["time_us"]))
            continue
        base_us, cur_us = baselines[key]["time_us"], record["time_us"]
        verdict = _verdict(cur_us, base_us, threshold, min_delta_us)
        if verdict != "OK":
            entry = (key, record, base_us, cur_us, cur_us / base_us if base_us > 0 else math.inf)
            (comparison.regressions if verdict == "regress" else comparison.improvements).append(entry)
    return comparison


def _fails(comparison, mode):
    on_regression = mode in ("regression", "missing-regression")
    on_missing = mode in ("missing", "missing-regression")
    return bool((on_regression and comparison.regressions) or (on_missing and comparison.missing))


def pytest_sessionfinish(session, exitstatus):
    """Compare, refresh and set the exit code here: it runs before the terminal summary, which shows the result."""
    config = session.config
    if common.is_xdist_worker(config) or config.stash.get(_STATE, None) is None:
        return
    state = _state(config)
    state.comparison = _compare(config)
    if state.comparison is None or exitstatus != 0:
        return  # a failing run is not a baseline, and its exit code already says it failed
    if config.getoption("--refresh-baseline"):
        state.update = _refresh_baselines(config, state.comparison.records)
        return
    if _fails(state.comparison, _fail_mode()):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# --- terminal report ------------------------------------------------------------------------------------------------


def _fmt_us(value):
    return "-" if value is None else f"{value:8.1f} us"


def _fmt_bw(value):
    return "-" if value is None else f"{value:6.1f} GB/s"


def _fmt_ratio(value):
    return "-" if value is None else f"{value:7.2f}x"


def _fmt_extra(value):
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _geomean(values):
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def _sort_key(record):
    """Kernel, operation, then the params name by name, numbers numerically (128 before 1024), anything else as
    text after the numbers (so mixed types never compare)."""
    params = record.get("params") or {}

    def rank(v):
        return (0, v) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v))

    return (
        record.get("kernel", ""),
        record.get("operation", ""),
        tuple((name, *rank(params[name])) for name in sorted(params)),
        _display_key(record),
    )


def _write_table(tr, columns, rows, footer=None):
    """Columns are (title, right-aligned); the first column is padded to its widest cell + 2, the others to theirs."""
    cells = rows + ([footer] if footer else [])
    widths = [max([len(title)] + [len(r[i]) for r in cells]) for i, (title, _) in enumerate(columns)]
    widths[0] += 2

    def line(values):
        out = []
        for (_, right), width, value in zip(columns, widths, values):
            out.append(value.rjust(width) if right else value.ljust(width))
        return " ".join(out).rstrip()

    header = line([title for title, _ in columns])
    tr.write_line(header)
    tr.write_line("-" * len(header))
    for row in rows:
        tr.write_line(line(row))
    if footer:
        tr.write_line("-" * len(header))
        tr.write_line(line(footer))


def _extras_names(records):
    return sorted({name for record in records for name in (record.get("extras") or {})})


def _write_matched(tr, comparison, verbose, threshold, min_delta_us):
    baselines = comparison.baselines
    matched = sorted((r for r in comparison.records if _record_key(r) in baselines), key=_sort_key)
    refs = [baselines[_record_key(r)] for r in matched]
    extras = _extras_names(matched + refs) if verbose else []
    columns = [("Kernel", False), ("Latency", True), ("Bandwidth", True), ("Ratio", True), ("Stat", True)]
    columns += [c for name in extras for c in ((f"{name}(cur)", True), (f"{name}(ref)", True))]
    rows = []
    for record, ref in zip(matched, refs):
        ratio = record["time_us"] / ref["time_us"] if ref["time_us"] > 0 else math.inf
        row = [
            _display_key(record),
            _fmt_us(record["time_us"]),
            _fmt_bw(record.get("bandwidth_gbs")),
            _fmt_ratio(ratio),
            _verdict(record["time_us"], ref["time_us"], threshold, min_delta_us),
        ]
        for name in extras:
            row += [_fmt_extra((record.get("extras") or {}).get(name)), _fmt_extra((ref.get("extras") or {}).get(name))]
        rows.append(row)
    ratio = _geomean(record["time_us"] / ref["time_us"] for record, ref in zip(matched, refs) if ref["time_us"] > 0)
    # the geomean ratio against the relative bar only: it has no single absolute delta
    status = "n/a" if ratio is None else _verdict(ratio, 1.0, threshold, -math.inf)
    footer = [
        "GEOMEAN",
        _fmt_us(_geomean(r["time_us"] for r in matched)),
        _fmt_bw(_geomean(r.get("bandwidth_gbs") for r in matched)),
        _fmt_ratio(ratio),
        status,
    ]
    _write_table(tr, columns, rows, footer + [""] * (len(columns) - len(footer)))


def _write_missing(tr, comparison, verbose):
    new = sorted((r for r in comparison.records if _record_key(r) not in comparison.baselines), key=_sort_key)
    extras = _extras_names(new) if verbose else []
    columns = [("Kernel", False), ("Current", True), ("Bandwidth", True)] + [(name, True) for name in extras]
    rows = [
        [_display_key(r), _fmt_us(r["time_us"]), _fmt_bw(r.get("bandwidth_gbs"))]
        + [_fmt_extra((r.get("extras") or {}).get(name)) for name in extras]
        for r in new
    ]
    footer = ["GEOMEAN", _fmt_us(_geomean(r["time_us"] for r in new)), _fmt_bw(_geomean(r.get("bandwidth_gbs") for r in new))]
    tr.write_line("")
    _write_table(tr, columns, rows, footer + [""] * len(extras))


def _write_update(tr, update):
    tr.section("Benchmark Baseline Update")
    tr.write_line(f"Output: {update['path']}")
    tr.write_line(
        f"Mode: {update['mode']}, {update['num_updated']} updated, {update['num_added']} new, "
        f"{update['num_removed']} removed, {update['num_records']} total benchmarks, "
        f"{update['num_shards']} shard(s) touched"
    )
    tr.write_line("")


def pytest_terminal_summary(terminalreporter, config):
    """The regression report: matched records against their baselines, the records without one, the totals."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    comparison = state.comparison or _compare(config)
    if comparison is None:
        return
    tr, threshold, min_delta_us = terminalreporter, _threshold(), _min_delta_us()
    if state.update is not None:
        _write_update(tr, state.update)
    tr.section("Benchmark Regression Report")
    tr.write_line("Ratio = current latency / recorded latency (smaller is better)")
    verbose = config.getoption("--benchmark-verbose")
    if comparison.baselines:
        _write_matched(tr, comparison, verbose, threshold, min_delta_us)
    else:
        tr.write_line("No baseline file found — skipping regression comparison.")
        tr.write_line(f"  (looked at: {_baselines_dir(config)})")
    if comparison.missing:
        _write_missing(tr, comparison, verbose)
    matched = len(comparison.records) - len(comparison.missing)
    tr.write_line("")
    tr.write_line(
        f"Total: {len(comparison.records)} benchmarks, {matched} with baselines, "
        f"{len(comparison.missing)} missing, {len(comparison.regressions)} regressions, "
        f"{len(comparison.improvements)} improvements (threshold: {threshold:.0%})"
    )
    for title, entries, describe in (
        ("!! IMPROVEMENTS DETECTED !!", comparison.improvements, lambda r: f"{1.0 / r:.2f}x faster"),
        ("!! REGRESSIONS DETECTED !!", comparison.regressions, lambda r: f"{r:.2f}x slower"),
    ):
        if entries:
            tr.write_line("")
            tr.write_line(title)
            for _, record, base_us, cur_us, ratio in entries:
                tr.write_line(f"  {_display_key(record)}: {cur_us:.1f} us vs baseline {base_us:.1f} us ({describe(ratio)})")
    if _fail_mode() not in _FAIL_MODES:
        tr.write_line("")
        tr.write_line(
            f"TK_BENCHMARK_FAIL_MODE={os.environ.get('TK_BENCHMARK_FAIL_MODE')!r} is not one of "
            f"{', '.join(_FAIL_MODES)}: treated as 'none' (the exit code ignores the benchmarks)"
        )


# --- fixtures -------------------------------------------------------------------------------------------------------


@pytest.fixture
def benchmark_record(request):
    """``record(*, kernel, operation, params, time_us, bandwidth_gbs=None, extras=None)``: store one benchmark
    result. It prints a ``BENCH`` line, appends the record to the JSONL output, keeps it for the end-of-run report
    and warns (``PERFORMANCE REGRESSION``) when it is slower than its baseline. Works without a GPU (bookkeeping
    only); ``benchmark_timer`` is what needs one.

    A record: ``kernel``, ``operation``, ``params`` (sorted), ``param_id`` (the pytest parametrize id or None),
    ``source_file`` (test file relative to the tests root, the shard it belongs to, or None), ``time_us`` (2
    decimals), and where present ``extra_params`` (params not in the node's ``params`` parametrization),
    ``bandwidth_gbs`` and ``extras`` (floats to 4 decimals)."""
    config, node = request.config, request.node
    state = _state(config)

    def record(*, kernel, operation, params, time_us, bandwidth_gbs=None, extras=None):
        rec = _build_record(node, kernel, operation, params, time_us, bandwidth_gbs, extras)
        print(_summary_line(rec, time_us, bandwidth_gbs, extras))
        if state.output:
            common.append_jsonl(state.output, rec)
        with state.lock:
            state.records.append(rec)
        _warn_if_regressed(config, rec, time_us)

    return record


def _warn_if_regressed(config, record, time_us):
    key = _record_key(record)
    baseline = _session_baselines(config).get(key)
    if baseline is None:
        return
    threshold, base_us = _threshold(), baseline["time_us"]
    if _verdict(time_us, base_us, threshold, _min_delta_us()) == "regress":
        ratio = time_us / base_us if base_us > 0 else math.inf
        warnings.warn(
            f"PERFORMANCE REGRESSION: {key} is {ratio:.2f}x slower than baseline "
            f"({time_us:.1f} us vs {base_us:.1f} us, threshold={threshold:.0%})",
            stacklevel=3,
        )


# Keywords of tilelang's do_bench that a test written for the peer may pass: they tune the peer's method (warm-up and
# measuring budgets in ms, CUPTI/event backend, L2 flush, aggregation) and have no counterpart in the graph timer.
_PEER_METHOD_KEYWORDS = frozenset(
    {"warmup", "rep", "_n_warmup", "_n_repeat", "fast_flush", "backend", "return_mode", "cache_size", "early_stop_baseline"}
)


@pytest.fixture
def benchmark_timer():
    """``timer(fn, **overrides) -> float``: the device time of one call of ``fn`` in microseconds
    (``timing.device_time_us``: median over CUDA-graph replays, events where ``fn`` cannot be captured).

    Overrides: ``calls`` (calls per replay, default 20), ``reps`` (replays, default 15), ``device`` (time on that
    CUDA device). The peer's ``do_bench`` keywords (``rep``, ``warmup``, ``backend``, ...) are accepted and ignored;
    ``quantiles`` is refused (one median is returned). Skips the test where torch sees no CUDA device."""
    if not common.cuda_available():
        pytest.skip("benchmark_timer measures CUDA kernels: torch sees no CUDA device on this machine")
    from kernelkiln.testing import timing

    def timer(fn, **overrides):
        ours = {k: v for k, v in overrides.items() if k not in _PEER_METHOD_KEYWORDS}
        device = ours.pop("device", None)
        unknown = sorted(set(ours) - {"calls", "reps"})
        if unknown:
            raise TypeError(
                f"benchmark_timer() got unsupported keyword(s) {unknown}; it takes calls, reps, device "
                "(and ignores the peer's do_bench tuning keywords)"
            )
        if device is None:
            return timing.device_time_us(fn, **ours)
        import torch

        with torch.cuda.device(device):
            return timing.device_time_us(fn, **ours)

    return timer
