"""Security-diff checks for changes that add risk without touching a permission or a budget (issue 9).

Each function takes the running :class:`~sealflow.dsl.diff._Differ` and adds findings to it:

* a write or irreversible step (or one whose effect is unknown without ``--actions``) that is no
  longer behind an approval it was behind before, whether by a new route (``switch`` case,
  ``on_error``, ``next``, ``on_timeout``), a ``when:`` on the gate, or an existing action reused in a
  new step ahead of the gate (D630);
* ``reauthorize: false`` written where the default applied (D621), a ``when:`` added to or changed on an
  approval step, ``show`` changed or made constant (D608), compensation removed (D628), retries added to an
  irreversible step (D605), ``output_schema`` or the input schema loosened (D622, D627), the run
  concurrency limit raised or removed (D629); an agent's MCP tool added or its pinned entry changed (D636,
  :mod:`sealflow.dsl.diff_mcp`).
"""

from __future__ import annotations

from typing import Any

from sealflow.dsl.diff_gates import effect_of, gates_before, sensitive
from sealflow.dsl.diff_mcp import mcp_changes
from sealflow.dsl.diff_schemas import loosened
from sealflow.dsl.plan import PlanStep


def step_risks(d: Any, os_: PlanStep, ns: PlanStep) -> None:
    """Risky changes to a step present on both sides (same id)."""
    sid = ns.id
    mcp_changes(d, os_, ns)
    if ns.reauthorize is False and os_.reauthorize is None:
        effect = effect_of(ns.action, d.new, d.old)
        if effect != "read":
            was = "on" if effect else "on for write and irreversible actions; effect unknown without --actions"
            d.add("D621", f"reauthorize: false added: permissions were re-checked right before the step by default "
                  f"({was}) and no longer are", d.sp(sid, "reauthorize"), step=sid, old=None, new=False)
    if ns.approval is not None and os_.approval is not None and ns.when != os_.when:
        verb = "added" if os_.when is None else ("removed" if ns.when is None else "changed")
        if ns.when is not None:
            d.add("D608", f"approval step condition {verb}: when {ns.when!r} (was {os_.when!r}); when it is false the "
                  "gate is skipped", d.sp(sid, "when"), step=sid, old=os_.when, new=ns.when)
    for label, a, b, pointer in (("approval", os_.approval, ns.approval, d.sp(sid, "approval")),
                                 ("approval gate", os_.gate, ns.gate, ("approvals",))):
        if a is not None and b is not None and a.show and b.show and a.show != b.show:
            constant = _is_constant(b.show)
            d.add("D608", f"{label}: show {'made constant' if constant else 'changed'}: {a.show!r} -> {b.show!r}"
                  + ("; approvers no longer see what they approve" if constant else ""),
                  pointer + ("show",), step=sid, old=a.show, new=b.show)
    if os_.compensate is not None and ns.compensate is None:
        d.add("D628", f"compensation removed (was {os_.compensate.action}): a failed run no longer undoes this step",
              d.sp(sid), step=sid, old=os_.compensate.action, new=None)
    elif os_.compensate is not None and ns.compensate is not None and os_.compensate.action != ns.compensate.action:
        d.add("D628", f"compensation changed: {os_.compensate.action} -> {ns.compensate.action}",
              d.sp(sid, "compensate", "action"), step=sid, old=os_.compensate.action, new=ns.compensate.action)
    _retries_on_irreversible(d, os_, ns)
    old_schema, new_schema = _output_schema(os_), _output_schema(ns)
    if old_schema is not None:
        reasons = list(loosened(old_schema, new_schema, "output_schema"))
        if reasons and new_schema is not None:  # removal is reported by the caller
            d.add("D622", f"output_schema loosened: {'; '.join(reasons[:5])}", d.sp(sid, ns.kind, "output_schema"),
                  step=sid, old=old_schema, new=new_schema)


def new_step_risks(d: Any, ns: PlanStep) -> None:
    _retries_on_irreversible(d, None, ns)
    mcp_changes(d, None, ns)


def workflow_risks(d: Any) -> None:
    """Risky changes to the workflow as a whole: routes around gates, input schema, concurrency."""
    _gate_paths(d)
    old_in, new_in = d.old.input_schema, d.new.input_schema
    if old_in is not None:
        reasons = list(loosened(old_in, new_in, "input.schema"))
        if reasons:
            d.add("D627", f"input schema loosened: {'; '.join(reasons[:5])}", ("input", "schema"),
                  old=old_in, new=new_in)
    oc, nc = d.old.concurrency, d.new.concurrency
    if oc is not None:
        if nc is None:
            d.add("D629", f"run concurrency limit removed (was {oc.get('limit')} per {oc.get('key')!r})", (),
                  old=oc, new=None)
        elif (nc.get("limit") or 0) > (oc.get("limit") or 0):
            d.add("D629", f"run concurrency limit raised: {oc.get('limit')} -> {nc.get('limit')}",
                  ("concurrency", "limit"), old=oc.get("limit"), new=nc.get("limit"))
        elif nc.get("key") != oc.get("key"):
            d.add("D629", f"run concurrency key changed: {oc.get('key')!r} -> {nc.get('key')!r} (the limit may now "
                  "apply per a finer key)", ("concurrency", "key"), old=oc.get("key"), new=nc.get("key"))


def _gate_paths(d: Any) -> None:
    old_before, new_before = gates_before(d.old), gates_before(d.new)
    old_steps = {s.id: s for _, s in d.old.all_steps()}
    # the gates every old step using an action was behind: a new step reusing it must be behind them too
    by_action: dict[str, frozenset[str]] = {}
    for s in old_steps.values():
        if s.action and s.id in old_before:
            prev = by_action.get(s.action)
            by_action[s.action] = old_before[s.id] if prev is None else prev & old_before[s.id]
    new_gate_ids = {s.id for _, s in d.new.all_steps() if s.approval is not None}
    for _, ns in d.new.all_steps():
        if ns.id not in new_before:
            continue
        risky, effect = sensitive(ns, d.new, d.old)
        if not risky:
            continue
        os_ = old_steps.get(ns.id)
        if os_ is not None and os_.action == ns.action and ns.id in old_before:
            was, why = old_before[ns.id], "a new route reaches it without passing"
        elif ns.action in by_action:
            was, why = by_action[ns.action], f"{ns.action} (behind it everywhere before) is now reused ahead of"
        else:
            continue
        # a gate that no longer exists is reported as removed (D607); here: gates still there but bypassed
        missing = sorted(g for g in was - new_before[ns.id] if g in new_gate_ids)
        if missing:
            d.add("D630", f"step {ns.id} ({ns.action or ns.kind}, {effect}): {why} approval "
                  f"{', '.join(missing)}", d.sp(ns.id), step=ns.id, old=sorted(was), new=sorted(new_before[ns.id]))


def _retries_on_irreversible(d: Any, os_: PlanStep | None, ns: PlanStep) -> None:
    if ns.kind != "action" or ns.retry.max_attempts <= 1:
        return
    effect = effect_of(ns.action, d.new, d.old)
    judged = ""
    if effect is None:  # without --actions: judge by the old definition, which never retried this action
        old_attempts = [s.retry.max_attempts for _, s in d.old.all_steps() if s.action == ns.action]
        if not old_attempts or max(old_attempts) > 1:
            return
        judged = " (effect unknown without --actions; the old definition never retried it)"
    elif effect != "irreversible":
        return
    if os_ is not None and os_.action == ns.action:
        return  # the same step and action: raised attempts are D605 from the retry comparison
    d.add("D605", f"{'irreversible ' if effect else ''}action {ns.action} runs with retries (max_attempts "
          f"{ns.retry.max_attempts}" + (f", class {ns.retry.name}" if ns.retry.name else "")
          + f"): a retried attempt may repeat the effect{judged}",
          d.sp(ns.id, "retry"), step=ns.id, old=os_.retry.max_attempts if os_ else None, new=ns.retry.max_attempts)


def _output_schema(step: PlanStep) -> Any:
    body = step.ai or step.agent
    return body.output_schema if body is not None else None


def _is_constant(text: str) -> bool:
    from sealflow.dsl.expressions import ExpressionError, compile_cached

    try:
        return not compile_cached(text).references()
    except ExpressionError:
        return False


__all__ = ["step_risks", "new_step_risks", "workflow_risks"]
