"""Plans built in Python for the interpreter tests, and a scripted model provider.

Plans are built directly from ``sealflow.dsl.plan`` models (no YAML) with :func:`make_plan`
and :func:`S`, so each test states exactly the steps it needs::

    plan = make_plan(S("a", "action", action="t.work"), S("b", "set", assign={"x": "1"}))
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sealflow.dsl.plan import END, ApprovalPlan, Edge, Plan, PlanStep, RetryPolicy

BACKENDS = ["sqlite", "postgres"]  # "redis" joins here when its store lands


def line_of(fn: Callable, text: str) -> int:
    """The line of ``fn``'s source that holds ``text`` (what a traceback of it names)."""
    import inspect

    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def S(step_id: str, kind: str, **fields: Any) -> dict:
    """One step of a plan (completed by :func:`make_plan`)."""
    return {"id": step_id, "kind": kind, **fields}


def gate(timeout_ms: int = 3_600_000, approvers=("role:manager",), **kw: Any) -> ApprovalPlan:
    return ApprovalPlan(approvers=tuple(approvers), timeout_ms=timeout_ms, implicit=True, **kw)


def approval(timeout_ms: int = 3_600_000, approvers=("role:manager",), **kw: Any) -> ApprovalPlan:
    return ApprovalPlan(approvers=tuple(approvers), timeout_ms=timeout_ms, **kw)


def retry(*on: str, max_attempts: int = 3, initial_ms: int = 1000, factor: float = 2.0, max_ms: int = 30_000,
          jitter: str = "none") -> RetryPolicy:
    return RetryPolicy(on=tuple(on), max_attempts=max_attempts, initial_ms=initial_ms, factor=factor,
                       max_ms=max_ms, jitter=jitter)


def make_plan(*steps: dict, name: str = "test-flow", version: int = 1, output: Any = None, **plan_fields: Any) -> Plan:
    """A digested plan; ``next`` defaults to the following step (or ``end``)."""
    built = []
    for i, spec in enumerate(steps):
        spec = dict(spec)
        kind = spec["kind"]
        fall = steps[i + 1]["id"] if i + 1 < len(steps) else END
        nxt = spec.pop("next", fall)
        spec.setdefault("timeout_ms", 5_000)
        spec.setdefault("retry", RetryPolicy())
        edges = [Edge(kind="next", target=nxt)] if kind not in ("switch", "fail", "succeed") else []
        if spec.get("when") and kind in ("switch", "fail", "succeed"):
            edges.append(Edge(kind="skip", target=nxt))
        built.append(PlanStep(index=i, next=None if kind in ("fail", "succeed") else nxt, edges=tuple(edges),
                              **spec))
    return Plan(name=name, version=version, owner="team:test", start=built[0].id, steps=tuple(built),
                output=output, **plan_fields).with_digest()


class FakeProvider:
    """A model provider answering from a list of scripted outputs (or raising scripted errors)."""

    def __init__(self, *answers: Any, name: str = "fake", tokens: int = 10, cost: float = 0.001):
        self.name = name
        self.answers = list(answers)
        self.requests: list = []
        self.tokens = tokens
        self.cost = cost

    def complete(self, request):
        from sealflow.providers.base import ModelResult

        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return ModelResult(output=answer, text=str(answer), input_tokens=self.tokens // 2,
                           output_tokens=self.tokens - self.tokens // 2, cost_usd=self.cost, model=request.model)


def serve_until(rt: Any, done: Callable[[], bool], *, bound: float = 90.0, **serve: Any) -> None:
    """Run ``rt.serve`` (a worker process's loop) in a thread until ``done()`` or ``bound`` real seconds,
    then stop it and close the runtime and its store (the worker scripts of the cross-process tests)."""
    stop = threading.Event()
    thread = threading.Thread(target=rt.serve, args=(stop,), kwargs={"interval": 0.02, "allow_open": True, **serve},
                              daemon=True)
    thread.start()
    end = time.monotonic() + bound
    try:
        while time.monotonic() < end and not done():
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(10)
        rt.close()
        rt.store.close()
