"""Fail fast under pytest-xdist (the peer's ``tile_kernels.testing.pytest.xdist_failfast``).

With ``-x`` (``--maxfail=1``) xdist stops handing out tests after the first failure but lets the workers finish what
they hold, which on a GPU suite can take minutes. With this plugin, ``pytest -n N -x`` interrupts the controller
(SIGINT, as Ctrl+C would) as soon as the first failing test's teardown report arrives, so that test's cleanup has
run; a crashed worker (a report with no setup/call/teardown phase, which is never followed by a teardown) interrupts
at once, and a teardown that hangs interrupts after a grace period. Worker restarts are turned off
(``--max-worker-restart 0``) so a crash ends the run instead of respawning. Without xdist, or without ``-x``, it does
nothing; the run then ends with pytest's "interrupted" exit code 2 and a section naming the first failure.
"""

import os
import signal
import threading

import pytest

_PLUGIN_NAME = "tk_xdist_failfast"
# Seconds to wait for the first failure's teardown report: it normally arrives at once; this only bounds a hang.
_TEARDOWN_GRACE_S = 10.0
_TEST_PHASES = ("setup", "call", "teardown")


def _wants_fail_fast(config):
    return getattr(config.option, "maxfail", 0) == 1 and bool(getattr(config.option, "numprocesses", None))


def pytest_configure(config):
    if not _wants_fail_fast(config):
        return
    if hasattr(config.option, "maxworkerrestart"):
        config.option.maxworkerrestart = 0
    if hasattr(config, "workerinput"):
        return  # the workers run tests; only the controller sees every worker's reports
    if not config.pluginmanager.has_plugin(_PLUGIN_NAME):
        config.pluginmanager.register(_FailFastController(), _PLUGIN_NAME)


def _interrupt_this_process():
    os.kill(os.getpid(), signal.SIGINT)


class _FailFastController:
    """Turns the first failure that the controller sees into one SIGINT."""

    def __init__(self, grace_s=None):
        self.grace_s = _TEARDOWN_GRACE_S if grace_s is None else grace_s
        self.first_failure = None
        self.done = False  # interrupted, or the session ended: never signal again
        self._timer = None
        self._lock = threading.Lock()

    @pytest.hookimpl(trylast=True)  # last: the terminal reporter has recorded the report before we interrupt
    def pytest_runtest_logreport(self, report):
        if self.done:
            return
        if report.failed and report.when not in _TEST_PHASES:
            self._interrupt()  # a worker crashed: no teardown report will follow
            return
        if report.failed and self.first_failure is None:
            self.first_failure = report
            self._timer = threading.Timer(self.grace_s, self._interrupt)
            self._timer.daemon = True
            self._timer.start()
        if self.first_failure is not None and report.when == "teardown" and report.nodeid == self.first_failure.nodeid:
            self._interrupt()

    def _finish(self):
        """Mark done and cancel the grace timer; True the first time."""
        with self._lock:
            if self.done:
                return False
            self.done = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        return True

    def _interrupt(self):
        if self._finish():
            _interrupt_this_process()

    def pytest_sessionfinish(self, session, exitstatus):
        self._finish()  # a pending grace timer must not fire after the session

    def pytest_terminal_summary(self, terminalreporter, config):
        # pytest's FAILURES section has the traceback; this only names the test that stopped the run
        if self.first_failure is not None:
            terminalreporter.section("First Failure Before Session Interrupt")
            terminalreporter.write_line(self.first_failure.nodeid)
