"""TileLang warning summary (the peer's ``tile_kernels.testing.pytest.tilelang_warning``), for a package with no
TileLang at run time.

The peer JIT-compiles with TileLang inside the test process, and TileLang's warnings never reach the terminal of a
passing test: its logger does not propagate to the root logger (lines like ``[TileLang:tilelang.cache:WARNING]``)
and TVM's C++ ``LOG(WARNING)`` writes ``: Warning: ...`` straight to stderr, both captured by pytest. The peer's
plugin scans each test's captured output for those two forms and prints them, per test, at the end of the run.

KernelKiln loads prebuilt cubins and never imports tilelang or tvm (the opt-in ``KERNELKILN_JIT=1`` fallback builds
in a subprocess whose output stays out of the test's), so for KernelKiln's own kernels this plugin finds nothing and
prints nothing. It keeps the same behaviour, which is the nearest meaningful equivalent: it still reports TileLang
warnings of other code in the same suite (a user's own TileLang kernels beside ours), and a conftest that names it
loads unchanged. No options, markers or fixtures (the peer's has none either).
"""

import re

# The part of a line that identifies a warning of either channel, independent of the timestamp before it; repeats of
# the same warning within a test collapse on it.
_WARNING = re.compile(r"(\[TileLang:[^\]]*:WARN(?:ING)?\].*|: Warning:.*)", re.IGNORECASE)

# node id -> the distinct warning lines of its call phase, for this session (reset by pytest_configure so sessions in
# one process, e.g. pytester's, do not see each other's).
_found = {}


def _warning_lines(report):
    """The distinct warning lines of a report's captured stdout and stderr, as printed."""
    seen, lines = set(), []
    for text in (report.capstdout, report.capstderr):
        for line in (text or "").splitlines():
            match = _WARNING.search(line)
            if match and match.group(1) not in seen:
                seen.add(match.group(1))
                lines.append(line)
    return lines


def pytest_configure(config):
    _found.clear()


def pytest_runtest_logreport(report):
    # the call phase is where the peer's kernels compile (setup and teardown only prepare and free tensors)
    if report.when == "call":
        lines = _warning_lines(report)
        if lines:
            _found.setdefault(report.nodeid, []).extend(lines)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _found:
        return
    tr = terminalreporter
    tr.write_sep("=", "TileLang warnings summary", yellow=True)
    for nodeid, lines in _found.items():
        tr.write_line(nodeid, yellow=True)
        for line in lines:
            tr.write_line(f"  {line}", yellow=True)
    total = sum(len(lines) for lines in _found.values())
    tr.write_line(f"{total} TileLang warning(s) across {len(_found)} test(s)", yellow=True)
