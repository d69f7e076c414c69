"""The security diff's checks of one step against its older self: retries, timeouts and approval gates."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sealflow.dsl.document import Pointer
from sealflow.dsl.durations import format_ms
from sealflow.dsl.plan import ApprovalPlan, MapPlan, PlanStep, RetryPolicy


def _on_timeout(value: str) -> str:
    return value if value == "reject" else f"next {value}"


class StepChecks:
    """Methods of the security diff's differ (:mod:`sealflow.dsl.diff`) that compare one step's retries,
    timeouts and gates; they report through its ``add``, declared here for the type checker."""

    if TYPE_CHECKING:
        def add(self, code: str, message: str, pointer: Pointer | None, *, step: str | None = None,
                old: Any = None, new: Any = None) -> None: ...

        def sp(self, step_id: str, *rest: Any) -> Pointer: ...

    def _retry(self, a: RetryPolicy, b: RetryPolicy, pointer: Pointer, sid: str, label: str) -> None:
        named = f" (class {b.name})" if b.name else ""
        # the class itself changed: point at the field in its definition; else at the step's retry
        in_class = bool(b.name) and a.name == b.name and label == "retry"
        at = (lambda *field: ("retry", b.name, *field)) if in_class else (lambda *field: pointer)  # noqa: E731
        pairs: tuple[tuple[str, Any, Any, Callable[[Any], str], tuple[str, ...]], ...]
        pairs = (("max_attempts", a.max_attempts, b.max_attempts, str, ("max_attempts",)),
                 ("backoff.initial", a.initial_ms, b.initial_ms, format_ms, ("backoff", "initial")),
                 ("backoff.max", a.max_ms, b.max_ms, format_ms, ("backoff", "max")),
                 ("backoff.factor", a.factor, b.factor, lambda v: f"{v:g}", ("backoff", "factor")))
        for key, x, y, show, field in pairs:
            if y > x:
                self.add("D605", f"{label} {key} raised: {show(x)} -> {show(y)}{named}", at(*field), step=sid,
                         old=x, new=y)
            elif y < x:
                self.add("D606", f"{label} {key} lowered: {show(x)} -> {show(y)}{named}", at(*field), step=sid,
                         old=x, new=y)
        added = [c for c in b.on if c not in a.on]
        removed = [c for c in a.on if c not in b.on]
        if added:
            self.add("D605", f"{label} now retries {', '.join(added)}{named}", at("on"), step=sid, old=a.on,
                     new=b.on)
        if removed:
            self.add("D606", f"{label} no longer retries {', '.join(removed)}{named}", at("on"), step=sid,
                     old=a.on, new=b.on)

    def _map(self, a: MapPlan, b: MapPlan, sid: str) -> None:
        """A wider fan-out (more items at once, more items, more failures tolerated) needs a reviewer."""
        def tolerance(m: MapPlan) -> str:
            return f"{m.tolerate_percent}%" if m.tolerate_percent is not None else str(m.tolerate_failures)

        pairs: list[tuple[str, Any, Any, Any, Any]] = [
            ("concurrency", a.concurrency, b.concurrency, a.concurrency, b.concurrency),
            ("max_items", a.max_items, b.max_items, a.max_items, b.max_items)]
        if (a.tolerate_percent is None) == (b.tolerate_percent is None):
            pairs.append(("tolerate_failures", a.tolerate_percent or a.tolerate_failures,
                          b.tolerate_percent or b.tolerate_failures, tolerance(a), tolerance(b)))
        elif tolerance(a) != tolerance(b):  # a count became a percentage or back: which is more depends on n
            pairs.append(("tolerate_failures", 0, 1 if tolerance(b) not in ("0", "0%") else 0, tolerance(a),
                          tolerance(b)))
        for key, x, y, shown_a, shown_b in pairs:
            if y > x:
                self.add("D631", f"map {key} raised: {shown_a} -> {shown_b}", self.sp(sid, "map", key), step=sid,
                         old=shown_a, new=shown_b)
            elif y < x:
                self.add("D632", f"map {key} lowered: {shown_a} -> {shown_b}", self.sp(sid, "map", key), step=sid,
                         old=shown_a, new=shown_b)

    def _timeout(self, a: int, b: int, pointer: Pointer, sid: str, label: str) -> None:
        if b > a:
            self.add("D615", f"{label} lengthened: {format_ms(a)} -> {format_ms(b)}", pointer, step=sid, old=a, new=b)

    def _gates(self, os_: PlanStep, ns: PlanStep) -> None:
        sid = ns.id
        if os_.approval and not ns.approval:
            self.add("D607", f"approval gate removed: the step is now {ns.kind}", self.sp(sid), step=sid,
                     old=os_.approval.approvers, new=None)
        elif ns.approval and not os_.approval:
            self.add("D609", "approval gate added", self.sp(sid, "approval"), step=sid)
        elif os_.approval and ns.approval:
            self._gate(os_.approval, ns.approval, self.sp(sid, "approval"), sid, "approval")
        if os_.gate and not ns.gate:
            self.add("D607", f"requires_approval_if removed (was {os_.requires_approval_if!r}): the step no longer "
                     "waits for an approval", self.sp(sid), step=sid, old=os_.requires_approval_if, new=None)
        elif ns.gate and not os_.gate:
            self.add("D609", f"requires_approval_if added: {ns.requires_approval_if!r}",
                     self.sp(sid, "requires_approval_if"), step=sid, new=ns.requires_approval_if)
        elif os_.gate and ns.gate:
            if os_.requires_approval_if != ns.requires_approval_if:
                self.add("D608", f"requires_approval_if changed: {os_.requires_approval_if!r} -> "
                         f"{ns.requires_approval_if!r} (it may now ask for approval less often)",
                         self.sp(sid, "requires_approval_if"), step=sid, old=os_.requires_approval_if,
                         new=ns.requires_approval_if)
            self._gate(os_.gate, ns.gate, ("approvals",), sid, "approval gate")

    def _gate(self, a: ApprovalPlan, b: ApprovalPlan, pointer: Pointer, sid: str, label: str) -> None:
        added = [x for x in b.approvers if x not in a.approvers]
        removed = [x for x in a.approvers if x not in b.approvers]
        if added:
            self.add("D608", f"{label}: more people may approve: {', '.join(added)} added", pointer + ("approvers",),
                     step=sid, old=a.approvers, new=b.approvers)
        if removed:
            self.add("D609", f"{label}: approvers removed: {', '.join(removed)}", pointer + ("approvers",), step=sid,
                     old=a.approvers, new=b.approvers)
        if b.quorum < a.quorum:
            self.add("D608", f"{label}: quorum lowered: {a.quorum} -> {b.quorum}", pointer + ("quorum",), step=sid,
                     old=a.quorum, new=b.quorum)
        elif b.quorum > a.quorum:
            self.add("D609", f"{label}: quorum raised: {a.quorum} -> {b.quorum}", pointer + ("quorum",), step=sid,
                     old=a.quorum, new=b.quorum)
        if a.on_timeout != b.on_timeout:
            code = "D608" if a.on_timeout == "reject" else ("D609" if b.on_timeout == "reject" else "D608")
            self.add(code, f"{label}: on_timeout {a.on_timeout} -> {_on_timeout(b.on_timeout)}",
                     pointer + ("on_timeout",), step=sid, old=a.on_timeout, new=b.on_timeout)
        if a.separation_of_duties and not b.separation_of_duties:
            self.add("D608", f"{label}: separation_of_duties turned off: the run's initiator may approve",
                     pointer + ("separation_of_duties",), step=sid, old=True, new=False)
        elif b.separation_of_duties and not a.separation_of_duties:
            self.add("D609", f"{label}: separation_of_duties turned on", pointer + ("separation_of_duties",),
                     step=sid, old=False, new=True)
        if a.show and not b.show:
            self.add("D608", f"{label}: show removed: the approval no longer binds to what is approved",
                     pointer, step=sid, old=a.show, new=None)
        if b.editable_schema is not None and a.editable_schema != b.editable_schema:
            what = "made editable: an approver may change what is approved" if a.editable_schema is None else \
                "editable schema changed: approvers may change what is approved in other ways"
            self.add("D608", f"{label}: {what}", pointer + ("editable",), step=sid,
                     old=a.editable_schema, new=b.editable_schema)
        if b.timeout_ms > a.timeout_ms:  # a longer window to approve a stale request: a weaker gate
            self.add("D608", f"{label}: timeout lengthened: {format_ms(a.timeout_ms)} -> {format_ms(b.timeout_ms)}",
                     pointer + ("timeout",), step=sid, old=a.timeout_ms, new=b.timeout_ms)
