"""The engine's configuration, built whole, and its middleware: hooks on claim, execute and commit.

An :class:`~sealflow.engine.engine.Engine` is given everything it reads at construction, in a frozen
:class:`EngineConfig`; nothing is assigned to it afterwards. What runs around a step and is not the step itself
(the trust gate, the budgets, reauthorisation, circuit breakers, telemetry, approval notifications) attaches as
:class:`EngineHooks`, in the spirit of Dramatiq's ``Middleware`` and Temporal's interceptors: a list of them in
the configuration, called in order, each overriding only the hooks it needs (the others are no-ops and cost
nothing: the engine calls only the hooks a class overrides).

The hooks, in the order the engine reaches them for one step message:

* **claim**: :meth:`~EngineHooks.claim_refused` (a stale, forged, cross-tenant or malformed message) and
  :meth:`~EngineHooks.claim_deferred` (a bulkhead, lock or pool is full);
* **execute**: :meth:`~EngineHooks.before_execute` (a gate: a :class:`Failed` refuses the attempt, which then
  does not run; the first refusal wins), :meth:`~EngineHooks.around_attempt` (around the execution *and* the
  commit of the attempt: a span, the log context, metrics), :meth:`~EngineHooks.around_execute` (around the
  step's own execution: a circuit breaker), :meth:`~EngineHooks.after_execute` (the outcome, amended: budgets
  charged);
* **commit**: :meth:`~EngineHooks.before_commit` (the commit, amended: a gate's notifications) and
  :meth:`~EngineHooks.run_ended` (the commit ended the run).

A hook is an *observer* (``gating = False``: telemetry, notifications) or a *gate* (``gating = True``: the trust
gate, budgets, reauthorisation, breakers). An observer that raises is logged, naming it, and never fails the
step (its hook is as if it were not there: ``before_commit`` leaves the commit as it was, ``around_attempt``
runs the attempt once all the same); a gate's exception is the step's, as it always was.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from sealflow.core.outcomes import Failed, Outcome
from sealflow.policy.access import AccessProvider, OpenAccess

if TYPE_CHECKING:
    from sealflow.execution.context import Execution
    from sealflow.policy.trustgate import TrustGate
    from sealflow.store.base import Commit
    from sealflow.store.errors import ClaimDeferred

log = logging.getLogger("sealflow.engine")

T = TypeVar("T")

#: ``around_attempt``'s ``proceed``: execute and commit the attempt; its outcome and what the commit made due
Proceed = Callable[[], tuple[Outcome, Any]]


class EngineHooks:
    """An engine middleware; every hook is a no-op here (override the ones you need). See the module docstring."""

    #: named in the log when an observer's hook raises
    name: str = "hooks"
    #: a gate's exception fails the step (as any of the engine's own); an observer's is logged and ignored
    gating: bool = False

    # -- claim -------------------------------------------------------------------------------------
    def claim_refused(self, reason: str) -> None:
        """A message was refused before anything ran (``reason``: the store's, or ``"malformed"``)."""

    def claim_deferred(self, exc: ClaimDeferred) -> None:
        """A claim was put off: a bulkhead, lock or pool is full (the message comes back later)."""

    # -- execute -----------------------------------------------------------------------------------
    def before_execute(self, x: Execution) -> Failed | None:
        """Why the claimed attempt must not run (it is not started; the refusal is its outcome), or None."""
        return None

    def around_attempt(self, x: Execution, refused: Failed | None, began: float,
                       proceed: Proceed) -> tuple[Outcome, Any]:
        """Wrap the attempt's execution and commit: call ``proceed()`` once and return what it returns."""
        return proceed()

    def around_execute(self, x: Execution, execute: Callable[[Execution], Outcome]) -> Outcome:
        """Wrap the step's own execution: return ``execute(x)``, or an outcome instead of calling it."""
        return execute(x)

    def after_execute(self, x: Execution, outcome: Outcome) -> Outcome:
        """The attempt's outcome, amended (or as it is)."""
        return outcome

    # -- commit ------------------------------------------------------------------------------------
    def before_commit(self, x: Execution, commit: Commit) -> Commit:
        """The commit about to be applied, amended (or as it is); called again for each rebuilt commit."""
        return commit

    def run_ended(self, run_id: str, state: str, created_at: float | None) -> None:
        """A commit of this engine ended run ``run_id`` in ``state`` (``created_at``: when it was submitted,
        if at hand)."""


def overrides(hooks: tuple[EngineHooks, ...], method: str) -> tuple[EngineHooks, ...]:
    """The hooks whose class overrides ``method`` (the engine calls only those: a no-op costs nothing)."""
    default = getattr(EngineHooks, method)
    return tuple(h for h in hooks if getattr(type(h), method, default) is not default)


@overload
def observed(hook: EngineHooks, what: str, call: Callable[[], T], fallback: T) -> T: ...


@overload
def observed(hook: EngineHooks, what: str, call: Callable[[], T]) -> T | None: ...


def observed(hook: EngineHooks, what: str, call: Callable[[], T], fallback: T | None = None) -> T | None:
    """``call()``; for an observer, an exception is logged (naming the hook) and ``fallback`` returned."""
    if hook.gating:
        return call()
    try:
        return call()
    except Exception:  # noqa: BLE001 - an observer never fails a step
        log.exception("engine hook %r failed in %s; the step goes on without it", hook.name, what)
        return fallback


def wrap(hook: EngineHooks, what: str, call_hook: Callable[[Callable[[], T]], T],
         proceed: Callable[[], T]) -> Callable[[], T]:
    """``proceed`` wrapped by ``call_hook(proceed)`` (an ``around_*`` hook of ``hook``). For an observer, a failure
    of the hook itself never fails the step nor runs it twice: the step's own exception goes up as it is, the
    step's result is kept when the hook failed after it, and a step the hook failed before starting runs
    without it."""
    if hook.gating:
        return lambda: call_hook(proceed)

    def wrapped() -> T:
        ran: list[Any] = []  # [result] once proceed returned; [None, exc] if it raised

        def inner() -> T:
            try:
                got = proceed()
            except BaseException as exc:
                ran[:] = [None, exc]
                raise
            ran[:] = [got]
            return got

        try:
            return call_hook(inner)
        except Exception as exc:
            if len(ran) == 2 and ran[1] is exc:  # the step's own exception: not the hook's
                raise
            log.exception("engine hook %r failed in %s; the step goes on without it", hook.name, what)
            return ran[0] if len(ran) == 1 else proceed()

    return wrapped


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """Everything the engine reads, given at construction (frozen: nothing is assigned to an engine later)."""

    #: this process's lease owner name (``host:pid:n``, :func:`sealflow.engine.recovery.owner_id`)
    owner: str
    #: who holds which permissions now (reauthorisation before sensitive steps)
    access: AccessProvider = dataclasses.field(default_factory=OpenAccess)
    #: tenant -> its max_running_steps (bulkhead; None: no tenant has one)
    running_limit: Callable[[str], int | None] | None = None
    #: pool name -> limit (step ``concurrency: NAME``)
    pools: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: which signers' definitions this process executes (None: no check, the embedded default)
    trust_gate: TrustGate | None = None
    #: the runtime configuration the steps read (:class:`sealflow.runtime.config.RuntimeConfig`; None: defaults)
    settings: Any = None
    #: middleware after the engine's own gates (trust, budgets, access, breakers), called in order
    hooks: tuple[EngineHooks, ...] = ()

    @property
    def actor(self) -> str:
        """The actor the engine's audit events name."""
        return f"worker:{self.owner}"
