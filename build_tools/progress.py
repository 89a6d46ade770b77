"""Live progress and the final summary of a kernel build.

One ``Progress`` follows a build through its steps (lower, nvcc), counting every
(variant, arch) job once per step. On a TTY it redraws one line in place; in a CI log
(not a TTY) it prints a plain line at most every ``interval`` seconds, so logs stay
short but show that the build is alive. Failures are collected with the variant key,
its parameters and the compiler's message, and reported together at the end.
"""
import re
import sys
import threading
import time


def _fmt_secs(s):
    s = int(round(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Failure:
    def __init__(self, step, key, arch, params, message):
        self.step, self.key, self.arch, self.params, self.message = step, key, arch, params, message

    def report(self):
        params = ", ".join(f"{k}={v!r}" for k, v in (self.params or {}).items())
        return (f"FAILED {self.step} {self.key} [{self.arch}]\n  params: {params}\n"
                + "\n".join("  | " + line for line in self.message.rstrip().splitlines()))


class Progress:
    """Counts jobs per step; ``steps`` run in order and each counts ``total`` jobs."""

    def __init__(self, total, label="build", stream=None, tty=None, interval=None, clock=time.monotonic,
                 steps=("lower", "nvcc")):
        self.total, self.label, self.STEPS = total, label, tuple(steps)
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval if interval is not None else (0.1 if self.tty else 10.0)
        self.clock = clock
        self.t0 = clock()
        self.done = {s: 0 for s in self.STEPS}
        self.cached = {s: 0 for s in self.STEPS}
        self.shared = {s: 0 for s in self.STEPS}  # done by another arch's job (build_tools.archshare); in cached too
        self.failures = []
        self._worked = False  # a job that was not a cache hit has finished
        self._last_draw = None
        self._lock = threading.Lock()
        self._line_open = False

    # -- events ---------------------------------------------------------------------------
    def advance(self, step, cached=False, n=1, shared=False):
        """``n`` jobs of ``step`` done: run, taken from the cache, or (``shared``) done by another arch's job, which
        costs this one nothing as a cache hit does."""
        with self._lock:
            cached = cached or shared
            self._worked = self._worked or not cached
            self.done[step] += n
            if cached:
                self.cached[step] += n
            if shared:
                self.shared[step] += n
            self._maybe_draw()

    def fail(self, step, key, arch, params, message, counted=False):
        """A failed job; ``counted``: its step already counted it done (ninja's status line)."""
        with self._lock:
            f = Failure(step, key, arch, params, message)
            self.failures.append(f)
            if not counted:
                self.done[step] += 1
            self._clear_line()
            # the headline at once (CI logs), the full message in the final report
            print(f"{self.label}: FAILED {step} {key} [{arch}]", file=self.stream, flush=True)
            self._maybe_draw(force=True)

    def skip(self, step, n):
        """Jobs of a step that will not run (e.g. nvcc after a failed lowering): count them done."""
        with self._lock:
            self.done[step] += n

    def tick(self):
        """Redraw if the interval has passed (no job finished, but time did)."""
        with self._lock:
            self._maybe_draw()

    # -- display --------------------------------------------------------------------------
    def fraction(self):
        return sum(self.done.values()) / max(1, self.total * len(self.STEPS))

    def eta(self):
        """Seconds left, from the rate of jobs that did real work (cache hits are near-instant)."""
        if not self._worked:
            return None
        worked = sum(self.done[s] - self.cached[s] for s in self.STEPS)
        if worked <= 0:
            return None
        remaining = self.total * len(self.STEPS) - sum(self.done.values())
        return remaining * (self.clock() - self.t0) / worked

    def line(self):
        steps = " | ".join(f"{s} {self.done[s]}/{self.total}" for s in self.STEPS)
        eta = self.eta()
        parts = [f"{self.label}: [{steps}] {100 * self.fraction():.0f}%",
                 f"{_fmt_secs(self.clock() - self.t0)} elapsed"]
        if eta is not None and self.fraction() < 1:
            parts.append(f"ETA {_fmt_secs(eta)}")
        parts.append(f"{sum(self.cached.values())} cached")
        parts.append(f"{len(self.failures)} failed")
        return ", ".join(parts)

    def _maybe_draw(self, force=False):
        now = self.clock()
        if not force and self._last_draw is not None and now - self._last_draw < self.interval:
            return
        self._last_draw = now
        if self.tty:
            self.stream.write("\r" + self.line() + "\x1b[K")
            self._line_open = True
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def _clear_line(self):
        if self.tty and self._line_open:
            self.stream.write("\r\x1b[K")
            self._line_open = False

    def log(self, text):
        """A message between redraws (keeps the TTY line intact)."""
        with self._lock:
            self._clear_line()
            print(text, file=self.stream, flush=True)
            if self.tty:
                self._maybe_draw(force=True)

    def finish(self, nbytes=None, cubins=None):
        """Close the live line and print the summary; returns the failure report ('' if none)."""
        with self._lock:
            self._clear_line()
            elapsed = self.clock() - self.t0
            built = {s: self.done[s] - self.cached[s] for s in self.STEPS}
            size = f", {nbytes / 1e6:.2f} MB of cubins" if nbytes is not None else ""
            n = self.total if cubins is None else cubins
            print(f"{self.label}: {n} kernels in {elapsed:.1f}s{size}; "
                  + ", ".join(f"{s}: {built[s]} run, " + (f"{self.shared[s]} shared between arches, "
                                                           if self.shared[s] else "")
                              + f"{self.cached[s] - self.shared[s]} from cache" for s in self.STEPS)
                  + f"; {len(self.failures)} failed", file=self.stream, flush=True)
            return "\n".join(f.report() for f in self.failures)


_NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\] nvcc (\S+)$")


def follow_ninja(lines, progress, job_of_output, other=None):
    """Feed ninja's output (run with NINJA_STATUS="[%f/%t] ", not a TTY) into ``progress``.

    Ninja prints one status line per finished edge; a failed edge is followed by
    ``FAILED: [code=N] <output>``, its command line and the compiler's stderr. ``job_of_output(path)``
    gives (key, arch, params) of a cubin path, optionally with a fourth item: how many jobs (variants)
    that edge builds (a compile unit, build_tools.units); ninja's other lines are appended to ``other``.
    Returns the number of failed edges."""
    failed, current = 0, None  # current: [output, lines] of the FAILED block being read

    def close():
        nonlocal current, failed
        if current is not None:
            key, arch, params = job_of_output(current[0])[:3]
            body = current[1][1:] if current[1] else []  # drop the echoed command line
            progress.fail("nvcc", key, arch, params, "\n".join(body) or "(no compiler output)", counted=True)
            failed += 1
            current = None

    for raw in lines:
        line = raw.rstrip("\n")
        m = _NINJA_STATUS.match(line)
        if m or line.startswith("ninja: "):
            close()
            if m:
                job = job_of_output(m.group(3))
                progress.advance("nvcc", n=job[3] if len(job) > 3 else 1)
            elif other is not None:
                other.append(line)
            continue
        if line.startswith("FAILED: "):
            close()
            current = [line.split()[-1], []]
        elif current is not None:
            current[1].append(line)
        elif other is not None:
            other.append(line)
    close()
    return failed
