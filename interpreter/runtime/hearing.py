"""Runs that hear the world: an event offered to the runs that wait for it (``wait: {event: ...}``), and the
result of an action step's callback (``callback:``, :meth:`Hearing.complete_callback`).

:meth:`Hearing.offer_event` is what the signed events endpoint (``POST /v1/events/{source}``) calls for each
delivery it verified, after the ``trigger.event`` definitions it starts: the event is kept in the tenant's event
inbox (for waits the runs reach later: :mod:`sealflow.store.inbox`), then offered to every run of the tenant whose
active attempt waits for an event of its type (and source). Each such attempt is resolved through the engine as an
approval is (fenced, re-read on conflict): it takes the event when the wait's ``match`` holds and its data passes
the wait's ``schema`` (the step succeeds with the data as its output), refuses it when the data fails the schema
(audited ``event_refused``; the run keeps waiting), and otherwise leaves it. A delivery repeated under the same id
is one event: it is kept once and offered once. The inbox keeps the last ``events.keep`` seconds (default an
hour): older events are dropped as new ones arrive.
"""

from __future__ import annotations

import dataclasses
import hmac
from typing import TYPE_CHECKING, Any

from sealflow.core.errors import ERROR_CLASSES
from sealflow.core.ids import split_step_id
from sealflow.core.outcomes import Failed, Outcome, Succeeded
from sealflow.execution import callbacks, schemacheck
from sealflow.execution.callbacks import CallbackRefused
from sealflow.steps import wait
from sealflow.store.errors import InvalidOperation, NotFound
from sealflow.store.inbox import WAITING_PAGE, InboxEvent
from sealflow.store.records import AuditEvent, Message

if TYPE_CHECKING:
    from sealflow.core.clock import Clock
    from sealflow.engine.engine import Engine
    from sealflow.execution.context import Execution
    from sealflow.runtime.config import RuntimeConfig
    from sealflow.store.base import Store

class _Left(Exception):
    """The waiting attempt does not take the event (not for this run, or refused): nothing is committed."""

    def __init__(self, verdict: str, why: str | None):
        super().__init__(why or verdict)
        self.verdict, self.why = verdict, why


@dataclasses.dataclass(frozen=True)
class Offered:
    """What one waiting run did with an offered event."""

    run_id: str
    step_id: str
    #: ``taken`` (the step succeeded with the event's data) or ``refused`` (the data failed the wait's schema)
    result: str
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"run_id": self.run_id, "step": self.step_id, "result": self.result}
        return out if self.error is None else {**out, "error": self.error}


class Hearing:
    """Methods of :class:`~sealflow.runtime.facade.Runtime` (see this module)."""

    if TYPE_CHECKING:
        store: Store
        engine: Engine
        clock: Clock
        config: RuntimeConfig

        def send(self, message: Message, priority: str | None = None) -> None: ...

    def offer_event(self, tenant: str, source: str, event_id: str, type: str, data: Any) -> list[Offered]:
        """Keep the event for ``tenant``'s waits and offer it to the runs waiting for it now (this module); what
        each waiting run it applied to did. A repeated (tenant, source, id) is not offered again: []."""
        now = self.clock.now()
        event = InboxEvent(tenant, source, event_id, type, data, now)
        # the inbox holds the last events.keep seconds of events, no more: older ones go as a new one comes
        self.store.inbox_prune(now - wait.keep_seconds(self.config))
        if not self.store.inbox_put(event):
            return []
        out: list[Offered] = []
        after = ""
        while True:  # every run waiting for this type, a page at a time (by run id)
            page = self.store.inbox_waiting(tenant, type, after=after, limit=WAITING_PAGE)
            for run_id, _ in page:
                att = self.store.active_attempt(run_id)
                if att is None or att.state != "waiting" or att.data.get("event") != type \
                        or att.data.get("source") not in (None, source):
                    continue
                got = self._offer(run_id, att.step_id, event)
                if got is not None:
                    out.append(got)
            if len(page) < WAITING_PAGE:
                return out
            after = page[-1][0]

    def _offer(self, run_id: str, step_id: str, event: InboxEvent) -> Offered | None:
        def decide(x: Execution) -> tuple[Outcome, tuple[AuditEvent, ...]]:
            spec = x.step.wait
            if spec is None or spec.event is None or (event.source, event.id) in wait.taken_before(x):
                raise _Left(wait.UNMATCHED, None)
            verdict, why = wait.offer(x, spec, event)
            if verdict != wait.TAKEN:
                raise _Left(verdict, why)
            return wait.taken(x, event), (AuditEvent("event.taken", x.step_id, f"event:{event.source}",
                                                     detail={"event": _named(event)}),)

        try:
            messages = self.engine.resolve(run_id, split_step_id(step_id)[0], decide, actor=f"event:{event.source}",
                                           event=True)
        except _Left as left:
            if left.verdict == wait.REFUSED:
                self.store.append_audit(AuditEvent("event_refused", step_id, f"event:{event.source}", run_id=run_id,
                                                   detail={"event": _named(event), "why": left.why}),
                                        self.clock.now())
                return Offered(run_id, step_id, wait.REFUSED, left.why)
            return None
        except (InvalidOperation, NotFound):  # it moved on meanwhile (timed out, cancelled, taken another event)
            return None
        for message in messages:
            self.send(message)
        return Offered(run_id, step_id, wait.TAKEN)


class CallbackHearing:
    """Methods of :class:`~sealflow.runtime.facade.Runtime`: a result posted for an action step's callback."""

    if TYPE_CHECKING:
        store: Store
        engine: Engine
        clock: Clock

        def send(self, message: Message, priority: str | None = None) -> None: ...

    def complete_callback(self, token: str, *, data: Any = None, failed: str | None = None, message: str = "",
                          actor: str = "callback", tenant: str | None = None) -> dict[str, Any]:
        """Complete the step the callback ``token`` names with ``data`` (checked against the step's callback
        ``schema``), or fail it with the error class ``failed``. :class:`CallbackRefused` (audited
        ``callback_refused``, never with the token) when the token is malformed, names no waiting attempt of a run
        (of ``tenant``, when given), is another attempt's or a used one, does not match, has expired, or the data
        fails the schema (``invalid``: the step keeps waiting)."""
        token_digest = callbacks.digest(token)
        shown = callbacks.shown(token_digest)
        run_id: str | None = None

        def refuse(reason: str, why: str, step: str | None = None) -> CallbackRefused:
            self.store.append_audit(AuditEvent("callback_refused", step, actor, run_id=run_id,
                                               detail={"reason": reason, "token": shown, "why": why}),
                                    self.clock.now())
            return CallbackRefused(reason, why)

        if failed is not None and failed not in ERROR_CLASSES:
            raise CallbackRefused("malformed", f"failed: {failed!r} is not an error class; use one of "
                                               f"{', '.join(sorted(ERROR_CLASSES))}")
        try:
            run_id, step_id, attempt = callbacks.parse(token)
        except CallbackRefused as exc:
            raise refuse(exc.reason, exc.message) from None
        try:
            run = self.store.get_run(run_id)
        except NotFound:
            run_id = None
            raise refuse("unknown", "no run waits for this callback") from None
        if tenant is not None and run.tenant != tenant:
            raise refuse("foreign_tenant", "no run waits for this callback", step_id)

        def check(att: Any) -> dict[str, Any]:
            """The callback the attempt waits for, if it is this token's (else the refusal, raised)."""
            waited = att.data.get(callbacks.CALLBACK) if att is not None else None
            if att is None or att.step_id != step_id or att.attempt != attempt or att.state != "waiting" \
                    or not isinstance(waited, dict):
                raise refuse("superseded", "the step this callback was for has moved on (completed, timed out, "
                                           "retried or cancelled): the callback is used or stale", step_id)
            if not hmac.compare_digest(str(waited.get("digest", "")), token_digest):
                raise refuse("forged", "no run waits for this callback", step_id)
            if self.clock.now() > float(waited.get("expires_at") or 0.0):
                raise refuse("expired", "the callback's timeout has passed", step_id)
            return waited

        check(self.store.active_attempt(run_id))

        def decide(x: Execution) -> tuple[Outcome, tuple[AuditEvent, ...]]:
            check(x.attempt)  # again, on the attempt the commit is decided on (fenced)
            detail = {"token": shown, "result": "failed" if failed else "completed"}
            done = AuditEvent("callback.completed", x.step_id, actor, detail=detail)
            if failed is not None:
                return Failed(failed, message or f"the called system reported {failed}"), (done,)
            spec = x.step.callback
            broken = schemacheck.problem(x, spec.result_schema if spec is not None else None, data, "callback")
            if broken is not None:
                raise refuse("invalid", f"the posted result {broken}", x.step_id)
            return Succeeded(data, detail={"callback": {"token": shown}}), (done,)

        try:
            messages = self.engine.resolve(run_id, split_step_id(step_id)[0], decide, actor=actor, callback=True)
        except InvalidOperation:
            raise refuse("superseded", "the step this callback was for has moved on", step_id) from None
        for m in messages:
            self.send(m)
        return {"run_id": run_id, "step": step_id, "result": "failed" if failed else "completed"}


def _named(event: InboxEvent) -> dict[str, str]:
    return {"id": event.id, "source": event.source, "type": event.type}
