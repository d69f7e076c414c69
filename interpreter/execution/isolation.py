"""Process isolation: one attempt's code in a child process of its own.

Where an attempt runs (:func:`mode_for`): the step's ``isolation:`` when written, else the action's
registration (``@action(..., isolation="process")``), else the worker's default (the runtime
configuration's top-level ``isolation:`` key, else ``$SEALFLOW_ISOLATION``, else ``thread``).

Under ``process`` the worker forks (:func:`run_forked`): the child inherits the registry, the
rendered arguments and ``ctx`` (no pickling of code, so any registered action can be isolated),
runs the action inside its sandbox and sends back its result, or its classified failure (with its
traceback: :mod:`sealflow.core.tracebacks`), through a pipe, writes out what it printed
(through the worker's redaction: :mod:`sealflow.core.redacted_output`), then ends with
``os._exit`` (no inherited cleanup runs twice). The worker waits on the pipe:

* the deadline passes: the child is killed with SIGKILL, which ends it even inside C code holding
  the GIL (a thread cannot be interrupted there), and the attempt fails with ``timeout``;
* the child dies without a result (SIGKILL, the out-of-memory killer, a segfault, ``os._exit``):
  only the attempt ends, with ``worker_lost`` (retried within ``max_attempts``); the worker lives on;
* the run is cancelled or the attempt's lease is lost: the worker writes to a second pipe, and the
  child's ``ctx.cancelled()`` turns true (it reads that pipe; the child never touches the store);
* the child sends back more than twice ``payloads.max_bytes`` (the output could not be stored anyway):
  it is killed, and the attempt fails with ``invalid_output``; the worker never holds more of it.

The cost is a fork and two pipes per attempt (``tools/benchmarks/isolation.py``, docs/benchmarks.md).
The child's result must be picklable (it is JSON in any case). Forking is POSIX only.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sealflow.core import redacted_output
from sealflow.core.errors import ConfigError
from sealflow.core.tracebacks import failure

if TYPE_CHECKING:
    from sealflow.core.outcomes import Failed, Succeeded

MODES = ("thread", "process")
ENV = "SEALFLOW_ISOLATION"
#: how often the waiting worker passes a cancellation (or a lost lease) on to the child
_POLL_S = 0.25
#: what a pickled result may weigh beyond twice the payload limit (pickle's framing, an error's text)
_RESULT_SLACK = 64 * 1024


def check_mode(value: Any, where: str) -> str:
    if not isinstance(value, str) or value not in MODES:
        raise ConfigError(f"{where}: isolation {value!r} must be one of {', '.join(MODES)}")
    return value


def worker_default(config: Any) -> str:
    """The worker-wide default: the configuration's ``isolation:`` key, else ``$SEALFLOW_ISOLATION``, else thread."""
    extra = getattr(config, "extra", None) or {}
    if extra.get("isolation") is not None:
        source = getattr(config, "source", None) or "the runtime configuration"
        return check_mode(extra["isolation"], source)
    env = os.environ.get(ENV)
    return check_mode(env, f"${ENV}") if env else "thread"


def mode_for(step: Any, act: Any, config: Any) -> str:
    """``thread`` or ``process``: the step's choice, else the action's, else the worker's default."""
    return getattr(step, "isolation", None) or getattr(act, "isolation", None) or worker_default(config)


class ChildDied(Exception):
    """The isolated process ended without sending a result."""

    def __init__(self, how: str):
        super().__init__(how)
        self.how = how


class ChildTimedOut(Exception):
    """The isolated process did not finish in time and was killed."""


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"was killed by signal {name}"
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)} without a result"
    return "ended without a result"


def _flush_output() -> None:
    """Flush ``sys.stdout`` and ``sys.stderr`` (what a redacting wrapper holds back too, in a child about to exit:
    :mod:`sealflow.core.redacted_output`)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing more can be written to it
            pass


def _child(body: Callable[[Callable[[], bool]], tuple[Any, ...]], out_fd: int, cancel_fd: int) -> None:
    """In the child: run, send ``pickle((kind, value))``, write out what the action printed (redacted, as in the
    worker) and exit at once (never returns)."""
    code = 0
    try:
        redacted_output.forked_child()

        def cancelled() -> bool:
            return bool(select.select([cancel_fd], [], [], 0)[0])

        try:
            payload = body(cancelled)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back classified
            payload = ("error", failure(exc), None)
        try:
            data = pickle.dumps(payload)
        except Exception as exc:  # noqa: BLE001 - an unpicklable result is the action's bug
            data = pickle.dumps(("error", ("internal", f"the isolated attempt's result could not be sent back: "
                                                       f"{type(exc).__name__}: {exc}", None, None), None))
        redacted_output.release_all()  # what the action printed goes out before its result
        _flush_output()
        view = memoryview(data)
        while view:
            view = view[os.write(out_fd, view):]
    except BaseException:  # noqa: BLE001 - nothing may escape into the forked copy of the worker
        code = 70
    finally:
        os._exit(code)


class ChildTooLarge(Exception):
    """The child sent back more than the parent reads; it was killed."""


def run_forked(body: Callable[[Callable[[], bool]], tuple[Any, ...]], timeout: float,
               should_cancel: Callable[[], bool] = lambda: False, max_bytes: int | None = None) -> tuple[Any, ...]:
    """Run ``body(cancelled)`` in a forked child; return what it returned (a picklable tuple).

    :class:`ChildTimedOut` after ``timeout`` seconds (the child is killed), :class:`ChildDied` when
    it ends without a result, :class:`ChildTooLarge` when its result passes ``max_bytes`` (the child is
    killed: the worker never holds more of it). ``should_cancel()`` is polled while waiting; once true, the
    child's ``cancelled()`` is true."""
    out_r, out_w = os.pipe()
    cancel_r, cancel_w = os.pipe()
    _flush_output()  # else the child would write again what this process had buffered
    pid = os.fork()
    if pid == 0:  # the child
        os.close(out_r)
        os.close(cancel_w)
        _child(body, out_w, cancel_r)
    os.close(out_w)
    os.close(cancel_r)
    chunks: list[bytes] = []
    got = 0
    told = False
    try:
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                raise ChildTimedOut(f"did not finish within {timeout:.3f}s and was killed")
            ready, _, _ = select.select([out_r], [], [], min(left, _POLL_S))
            if ready:
                chunk = os.read(out_r, 1 << 16)
                if not chunk:
                    break
                got += len(chunk)
                if max_bytes is not None and got > max_bytes:
                    os.kill(pid, signal.SIGKILL)
                    raise ChildTooLarge(f"sent back more than {max_bytes} bytes and was killed")
                chunks.append(chunk)
            elif not told and should_cancel():
                told = True
                try:
                    os.write(cancel_w, b"c")
                except OSError:
                    pass
    finally:
        os.close(out_r)
        os.close(cancel_w)
        _, status = os.waitpid(pid, 0)
    if not chunks:
        raise ChildDied(_describe(status))
    try:
        result: tuple[Any, ...] = pickle.loads(b"".join(chunks))
        return result
    except Exception as exc:  # noqa: BLE001 - a child killed while writing
        raise ChildDied(f"{_describe(status)} (its result was cut short: {exc})") from None


def call_isolated(x: Any, box: Any, fn: Callable[[Any], Any], ctx: Any, timeout: float,
                  cancelled: Callable[[], bool], key: str | None) -> Succeeded | Failed:
    """:func:`sealflow.execution.calls.call` under ``isolation: process``: ``fn(ctx)`` in a
    forked child inside its sandbox; the outcome, classified like a threaded attempt's."""
    from sealflow.core.outcomes import Failed, Succeeded
    from sealflow.execution.context import payload_limit

    def body(child_cancelled: Callable[[], bool]) -> tuple[Any, ...]:
        ctx._cancelled = child_cancelled
        try:
            out = box.run(fn, ctx)
        except BaseException as exc:  # noqa: BLE001 - classified in the child, sent back with its traceback
            return ("error", failure(exc), box.failure())
        return ("ok", out, box.failure())

    limit = payload_limit(x.services.config)
    try:
        kind, value, over = run_forked(body, timeout, cancelled, max_bytes=2 * limit + _RESULT_SLACK)
    except ChildTooLarge as exc:
        return Failed("invalid_output", f"the isolated process running step {x.step.id!r} {exc}: its output "
                                        f"would be over the limit of {limit} bytes (payloads.max_bytes in the "
                                        "runtime configuration)")
    except ChildTimedOut:
        return Failed("timeout", f"attempt {x.attempt.try_no} of step {x.step.id!r} exceeded its timeout of "
                                 f"{x.step.timeout_ms}ms; its isolated process was killed", timed_out=True)
    except ChildDied as exc:
        return Failed("worker_lost", f"the isolated process running step {x.step.id!r} {exc.how}", lost=True)
    if over:
        return Failed("policy_denied", over)
    if kind == "error":
        error_class, message, retry_after, trace = value
        return Failed(error_class, message, retry_after, trace=trace)
    return Succeeded(value, ledger_key=key)
