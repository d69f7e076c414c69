"""Calls behind a circuit breaker: a step's ``circuit_breaker:`` and a model provider's ``circuit_breaker:``.

:func:`guarded` asks the store whether the breaker admits the call (:meth:`Store.breaker_admit`); an open
breaker fails the attempt at once with ``circuit_open`` and ``retry_after`` = the rest of its cool-down,
without calling the target (so a retry class listing ``circuit_open`` waits the cool-down out, and an ai
step's ``fallback`` takes over). Otherwise the call runs and its outcome is recorded
(:meth:`Store.breaker_record`); a transition is audited on the run (``circuit_opened``,
``circuit_closed``). The rules are :mod:`sealflow.core.breakers`; the state is in the store,
shared by every process. If the store cannot answer, the call goes through (logged): a breaker protects
the target, it must not stop work the store would otherwise allow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sealflow.core import breakers as rules
from sealflow.core.breakers import BreakerSettings
from sealflow.core.outcomes import Failed, Outcome, Skipped
from sealflow.execution.context import Execution
from sealflow.store.records import AuditEvent

#: what the guarded call returns (a step's outcome; a model call's Succeeded or Failed)
OutcomeT = TypeVar("OutcomeT", bound=Outcome)

log = logging.getLogger("sealflow.breakers")


def step_breaker(x: Execution) -> tuple[str, BreakerSettings] | None:
    """The step's breaker and its settings (runtime config ``circuit_breakers:``), or None."""
    name = x.step.circuit_breaker
    if not name or x.gate:
        return None
    return name, rules.settings_for(name, getattr(x.services.config, "extra", None))


def guarded(x: Execution, execute: Callable[[Execution], Outcome]) -> Outcome:
    """``execute(x)`` behind the step's circuit breaker, if it names one."""
    found = step_breaker(x)
    if found is None:
        return execute(x)
    return through(x, found[0], found[1], lambda: execute(x), what=f"step {x.step.id!r}")


def through(x: Execution, name: str, settings: BreakerSettings, call: Callable[[], OutcomeT], *,
            what: str) -> OutcomeT | Failed:
    """``call()`` if breaker ``name`` admits it, its outcome recorded; else ``circuit_open``."""
    store, clock = x.services.store, x.services.clock
    try:
        admission = store.breaker_admit(name, clock.now(), settings)
    except Exception:  # noqa: BLE001 - fail open: the store's trouble is not the target's
        log.exception("circuit breaker %r: the store did not answer; calling through", name)
        return call()
    if not admission.allowed:
        return Failed("circuit_open", f"circuit breaker {name!r} is {admission.state.replace('_', '-')} "
                                      f"(after {admission.failures} failures); {what} did not call its target; "
                                      f"it may be tried again in {admission.retry_after:.1f}s",
                      max(admission.retry_after, 0.001))
    outcome = call()
    if isinstance(outcome, Skipped):  # `when` was false: the target was not called; hand a probe back
        if admission.probe:
            try:
                store.breaker_record(name, clock.now(), settings, error_class=None, probe=True, called=False)
            except Exception:  # noqa: BLE001 - the probe's lease ends by itself
                log.exception("circuit breaker %r: could not hand the probe back", name)
        return outcome
    failed = outcome if isinstance(outcome, Failed) else None
    try:
        before, after = store.breaker_record(name, clock.now(), settings,
                                             error_class=None if failed is None else failed.error_class,
                                             probe=admission.probe, message=None if failed is None else failed.message)
    except Exception:  # noqa: BLE001 - the outcome stands; the breaker misses one data point
        log.exception("circuit breaker %r: could not record the outcome", name)
        return outcome
    if before != after and after in ("open", "closed"):
        try:
            store.append_audit(AuditEvent(f"circuit_{'opened' if after == 'open' else 'closed'}", x.step_id,
                                          "engine", state_before=before, state_after=after, run_id=x.run.id,
                                          detail={"breaker": name, "error_class": None if failed is None
                                                  else failed.error_class}), clock.now())
        except Exception:  # noqa: BLE001 - an audit line must not change the outcome
            log.exception("circuit breaker %r: could not audit the transition", name)
    return outcome


def through_model(x: Execution, model: str, provider: object, call: Callable[[], OutcomeT]) -> OutcomeT | Failed:
    """``call()`` (a model call) through breaker ``model:<model>`` when the provider's configuration
    (the ``models:`` section) has ``circuit_breaker:`` settings; else just ``call()``."""
    spec = getattr(getattr(provider, "config", None), "circuit_breaker", None)
    if spec is None:
        return call()
    settings = BreakerSettings(failures=spec.failures, window=spec.window, cool_down=spec.cool_down)
    return through(x, f"model:{model}", settings, call, what=f"model {model!r}")
