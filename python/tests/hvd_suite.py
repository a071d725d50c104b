"""The job side of the Horovod-mode pytests: a job script registers named checks, runs them all
on every rank, and prints one line per check so that the pytest (see hvd_jobs.py) can say which
check failed on which rank.

Output of one rank (one line each, flushed, so a rank that dies leaves what it did behind):
    PLAN rank=<r> checks=<count>
    CHECK rank=<r> <name> ok
    CHECK rank=<r> <name> FAIL <ExceptionType>: <message on one line>
    DONE rank=<r> failed=<count>
The process exits 1 when a check failed, 0 otherwise.

Checks run in registration order on every rank, so the collectives inside them match across
ranks. A check that fails after its collectives completed leaves the ranks in step; one that
fails half-way can leave the others waiting on a name it never submitted: the jobs set
HOROVOD_STALL_SHUTDOWN_TIME_SECONDS so that such a wait fails (naming the missing rank) instead
of hanging, and the pytest's deadline bounds the whole job.
"""
import sys
import traceback


class Suite:
    def __init__(self, rank):
        self.rank = rank
        self.checks = []  # (name, fn)

    def check(self, name):
        """Decorator: registers fn() as the check `name` (unique within the suite)."""
        if any(n == name for n, _ in self.checks):
            raise ValueError("check %r registered twice" % name)
        if not name or any(c.isspace() for c in name):
            raise ValueError("check names are non-empty and have no spaces: %r" % name)

        def register(fn):
            self.checks.append((name, fn))
            return fn

        return register

    def add(self, name, fn, *args):
        """Registers fn(*args) as the check `name` (for checks generated in a loop)."""
        self.check(name)(lambda: fn(*args))

    def _say(self, line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def run(self, finish=None):
        """Runs every check; then finish() (e.g. hvd.shutdown); exits with the outcome."""
        self._say("PLAN rank=%d checks=%d" % (self.rank, len(self.checks)))
        failed = 0
        for name, fn in self.checks:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - every failure is reported, then the next
                failed += 1
                detail = ("%s: %s" % (type(e).__name__, e)).replace("\n", " | ")
                self._say("CHECK rank=%d %s FAIL %s" % (self.rank, name, detail[:2000]))
                traceback.print_exc(file=sys.stderr)
            else:
                self._say("CHECK rank=%d %s ok" % (self.rank, name))
        if finish is not None:
            finish()
        self._say("DONE rank=%d failed=%d" % (self.rank, failed))
        sys.exit(1 if failed else 0)


class Deferred:
    """Checks of a helper module, defined at its import (before hvd.init()) and registered into
    the job's Suite later, at the point of its own checks where the job calls add_to: the
    checks then run, with their collectives, in that order."""

    def __init__(self):
        self.checks = []  # (name, fn), in definition order

    def check(self, name):
        def register(fn):
            self.checks.append((name, fn))
            return fn

        return register

    def add_to(self, suite):
        for name, fn in self.checks:
            suite.check(name)(fn)
