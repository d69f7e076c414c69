"""What executing one step attempt produced, before the engine decides what it means.

Step kinds (:mod:`sealflow.steps`) return one of these; :mod:`sealflow.engine.decide`
turns it, with the plan and the run, into one atomic
:class:`~sealflow.store.base.Commit`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sealflow.core.jsonc import clean_text, short_message


@dataclasses.dataclass(slots=True)
class Succeeded:
    """The step produced ``output``; control goes to ``next`` (None: the step's own ``next``)."""

    output: Any = None
    next: str | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    #: record ``output`` in the idempotency ledger under this key, in the same commit
    ledger_key: str | None = None
    #: the output came from the ledger; the action was not called
    replayed: bool = False
    detail: dict[str, Any] | None = None
    #: replaces the attempt's stored ``data`` (approvals record who approved)
    data: dict[str, Any] | None = None


@dataclasses.dataclass(slots=True)
class Failed:
    """The attempt failed with an error class (see DSL.md "Error classes")."""

    error_class: str
    message: str
    retry_after: float | None = None
    #: the attempt ran out of time (step state ``timed_out`` rather than ``failed``)
    timed_out: bool = False
    #: go here instead of retrying or failing the run (approval ``on_timeout: {next}``)
    route: str | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    #: the effect happened before the failure (e.g. output rejected by ``validate``):
    #: record it in the ledger so a retry does not repeat the effect
    ledger_key: str | None = None
    ledger_output: Any = None
    #: stored on the failed attempt (as ``Succeeded.data``): e.g. the tool calls an agent made
    data: dict[str, Any] | None = None
    #: audited with the failure (``step.detail``); minimised, no raw tool results
    detail: dict[str, Any] | None = None
    #: end the run in this state at once (``failed``, ``timed_out``, ``quarantined``): no retry, no ``on_error``
    #: route; run budgets and tenant quotas (:mod:`sealflow.policy.budgets`), a poison step
    ends_run: str | None = None
    #: the process running the attempt died (an isolated child): the engine decides what the loss means
    #: (:func:`sealflow.engine.poison.after_crash`); never committed as such
    lost: bool = False
    #: run the same try again (a lost attempt): not a retry, ``max_attempts`` is not consumed; the next
    #: attempt's data is ``data``
    rerun: bool = False
    #: not retried whatever the retry class says (``on_error`` may still route it): a person judged it failed
    no_retry: bool = False
    #: the traceback of the exception the attempt's code raised (:mod:`sealflow.core.tracebacks`),
    #: kept with the failed attempt; None for a classified failure
    trace: str | None = None

    def __post_init__(self) -> None:
        # an exception's text is the action's (or a model's, a web service's): what no store can hold in plain
        # text (NUL, an unpaired surrogate) is replaced, so that the failure is recorded, never lost with it; and
        # it may be a whole response body: only its first few thousand characters are kept
        self.message = clean_text(short_message(str(self.message)))
        if self.trace is not None:  # (bounded where it was made)
            self.trace = clean_text(str(self.trace))


@dataclasses.dataclass(slots=True)
class Skipped:
    """``when`` was false; control goes to ``target``."""

    target: str


@dataclasses.dataclass(slots=True)
class Waiting:
    """The attempt waits: for a timer at ``due_at`` and/or a human; no worker is held."""

    due_at: float | None
    timer_kind: str | None
    data: dict[str, Any]
    output: Any = None
    #: what the attempt used before it had to wait (charged with the wait: a model over its rate limit)
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    #: audited with the wait (e.g. ``rate_limited``, with ``detail``)
    event: str | None = None
    detail: dict[str, Any] | None = None
    #: child runs to start in the same commit (a fan-out step: :class:`~sealflow.store.changes.Spawn`)
    spawn: Any = None


@dataclasses.dataclass(slots=True)
class EndRun:
    """``succeed`` / ``fail`` steps: the run ends here."""

    state: str  # completed | failed
    output: Any = None
    error_class: str | None = None
    message: str | None = None


Outcome = Succeeded | Failed | Skipped | Waiting | EndRun
