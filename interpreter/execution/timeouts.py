"""Per-attempt timeouts that hold even when an action blocks in C code.

Dramatiq's ``TimeLimit`` raises an exception asynchronously into the worker
thread, which cannot interrupt a blocking system call or C extension. So each
action (or model call) runs on a *runner* thread while the worker waits for
it with a timeout. When the timeout passes the worker marks the attempt
``timed_out`` (error class ``timeout``) and moves on; the runner thread is
*abandoned*: whatever it returns later is dropped here, and even if it were
not, the attempt's fencing token has moved on, so a late commit would fail
(:class:`~sealflow.store.errors.FencingError`). An abandoned job sees
``ctx.cancelled()`` turn true, so a cooperative action can stop early.

Runner threads are pooled (one thread per attempt would cost a thread start
per step); a runner whose job was abandoned rejoins the pool when that job
finally returns.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("sealflow.timeouts")


class AttemptTimedOut(Exception):
    """The attempt did not finish within its timeout; its thread was abandoned."""


class WaitInterrupted(Exception):
    """The thread waiting for an attempt was interrupted (``interrupt``: a ``KeyboardInterrupt`` or
    ``SystemExit`` raised in that thread, as in the caller of ``Runtime.run``): not the attempt's failure. The
    attempt was abandoned; its caller raises ``interrupt`` on."""

    def __init__(self, interrupt: BaseException):
        super().__init__(f"the wait for an attempt was interrupted: {type(interrupt).__name__}")
        self.interrupt = interrupt


def _ran() -> Any:
    raise RuntimeError("this attempt's function has already run")


class Job:
    __slots__ = ("fn", "done", "guard", "result", "error", "finished", "abandoned")

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.done = threading.Lock()
        self.done.acquire()
        self.guard = threading.Lock()
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = False
        self.abandoned = False


class _Runner(threading.Thread):
    def __init__(self, pool: AttemptRunner, number: int):
        super().__init__(name=f"sealflow-attempt-{number}", daemon=True)
        self.pool = pool
        self.inbox: queue.SimpleQueue[Job | None] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            job = self.inbox.get()
            if job is None:
                return
            try:
                job.result = job.fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting worker
                job.error = exc
            with job.guard:
                job.finished = True
                late = job.abandoned
            job.done.release()
            job.fn = _ran  # let go of what the function holds
            if late:
                log.warning("a timed-out attempt returned late; its result was discarded")
            if not self.pool._give_back(self):
                return


class AttemptRunner:
    """Run callables on pooled threads, each bounded by a timeout."""

    def __init__(self, *, max_idle: int = 16):
        self._idle: list[_Runner] = []
        self._lock = threading.Lock()
        self._max_idle = max_idle
        self._count = 0
        self._closed = False

    def _take(self) -> _Runner:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self._count += 1
            number = self._count
        runner = _Runner(self, number)
        runner.start()
        return runner

    def _give_back(self, runner: _Runner) -> bool:
        with self._lock:
            if self._closed or len(self._idle) >= self._max_idle:
                return False
            self._idle.append(runner)
            return True

    def submit(self, fn: Callable[[], Any]) -> Job:
        job = Job(functools.partial(contextvars.copy_context().run, fn))  # log context and span go with it
        self._take().inbox.put(job)
        return job

    def wait(self, job: Job, timeout: float | None) -> Any:
        """The job's result (or its exception re-raised); :class:`AttemptTimedOut` after ``timeout`` s;
        :class:`WaitInterrupted` when this thread is interrupted while it waits (the job is abandoned)."""
        try:
            done = job.done.acquire(timeout=-1 if timeout is None else max(0.0, timeout))
        except BaseException as exc:  # raised in this thread (Ctrl-C), not by the job
            with job.guard:
                job.abandoned = not job.finished
            raise WaitInterrupted(exc) from None
        if not done:
            with job.guard:
                if not job.finished:
                    job.abandoned = True
                    raise AttemptTimedOut(f"the attempt did not finish within {timeout:.3f}s")
        if job.error is not None:
            raise job.error
        return job.result

    def run(self, fn: Callable[[], Any], timeout: float | None) -> Any:
        return self.wait(self.submit(fn), timeout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for runner in idle:
            runner.inbox.put(None)
