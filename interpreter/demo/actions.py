"""Demo CRM and email actions (``crm.*``, ``email.*``), backed by the demo database.

They are what the lead-qualification example calls. ``crm.add_note`` and
``email.send`` run at most once per ``ctx.idempotency_key``: a repeat returns the
first result and changes nothing.
"""

from __future__ import annotations

import json
import re
from string import Template
from typing import Any

from sealflow.core.errors import StepError
from sealflow.demo import store
from sealflow.execution.actions import action


def _weekly_body(report: dict[str, Any]) -> str:
    """The weekly report's body from the composed report (headline, status, highlights, risks, numbers)."""
    def get(key: str) -> Any:
        return report.get(key, "?")

    lines = [f"{report.get('headline', 'Weekly AI report')} (status: {get('status')})", ""]
    lines += [f"- {h}" for h in report.get("highlights") or []]
    risks = [r for r in report.get("risks") or [] if isinstance(r, dict)]
    if risks:
        lines += ["", "Risks:"] + [f"- [{r.get('severity', '?')}] {r.get('title', '')}" for r in risks]
    lines += ["", f"Tokens: {get('tokens')}, cost: ${get('cost_usd')}, runs: {get('runs')} "
              f"({get('failed_runs')} failed), incidents: {get('incidents')}"]
    return "\n".join(lines)


#: template -> (subject, body): ``$name`` placeholders are filled from vars; a body may be a function of vars
EMAIL_TEMPLATES: dict[str, tuple[str, Any]] = {
    "sales_followup": ("Following up on your interest in Sealflow",
                       "Hello $name,\n\nThank you for your interest in Sealflow. A member of our sales team "
                       "would be glad to show you how it fits $company. Reply to this email to pick a time.\n\n"
                       "Best regards,\nThe Sealflow sales team"),
    "welcome": ("Welcome to Sealflow", "Hello $name,\n\nWelcome aboard.\n\nThe Sealflow team"),
    "weekly_ai_report": ("AI in production, week $week: $headline", _weekly_body),
}
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _lead(conn: Any, lead_id: Any) -> dict[str, Any]:
    row = conn.execute("SELECT record FROM leads WHERE lead_id = ?", (str(lead_id),)).fetchone()
    if row is None:
        raise StepError("invalid_request", f"no lead {lead_id!r} in the demo CRM")
    lead: dict[str, Any] = json.loads(row["record"])
    return lead


@action("crm.get_lead", permissions=["crm:read"], effect="read")
def get_lead(ctx: Any, lead_id: str) -> dict[str, Any]:
    """The lead record: lead_id, name, title, company, email, industry, country, employees, budget_usd, notes."""
    with store.connect() as conn:
        return _lead(conn, lead_id)


@action("crm.add_note", permissions=["crm:write"], effect="write")
def add_note(ctx: Any, lead_id: str, note: str) -> dict[str, Any]:
    """Append ``note`` to the lead's notes; returns ``{note_id}``. Once per idempotency key."""
    if not isinstance(note, str) or not note.strip():
        raise StepError("invalid_request", "a note needs some text")

    def perform(conn: Any) -> dict[str, Any]:
        _lead(conn, lead_id)
        n, note_id = store.next_id(conn, "lead_notes", "note")
        conn.execute("INSERT INTO lead_notes VALUES (?, ?, ?, ?, ?, ?)",
                     (n, note_id, lead_id, note, store.run_id(ctx), store.idempotency_key(ctx)))
        return {"note_id": note_id}

    return store.once(ctx, "crm.add_note", {"lead_id": lead_id, "note": note}, perform)


@action("email.send", permissions=["email:send"], effect="irreversible")
def send(ctx: Any, to: str, template: str, subject: str | None = None, body: str | None = None,
         vars: dict[str, Any] | None = None) -> dict[str, Any]:
    """Send an email (into the demo outbox); returns ``{message_id}``. Once per idempotency key.

    ``template`` is a known template (``sales_followup``, ``welcome``, ``weekly_ai_report``);
    its ``$name`` placeholders are filled from the top-level text and number values of
    ``vars`` (a template may also render lists and maps from it). ``subject``/``body``
    override the template's; an unknown template needs both.
    """
    if not isinstance(to, str) or not _EMAIL.match(to):
        raise StepError("invalid_request", f"email.send: {to!r} is not an email address")
    if vars is not None and not isinstance(vars, dict):
        raise StepError("invalid_request", "email.send: vars must be a map")
    known = EMAIL_TEMPLATES.get(template)
    if known is None:
        if subject is None or body is None:
            raise StepError("invalid_request", f"email.send: unknown template {template!r}; known: "
                            f"{', '.join(sorted(EMAIL_TEMPLATES))} (or give subject and body)")
    else:
        if body is None:
            body = known[1](vars or {}) if callable(known[1]) else known[1]
        if subject is None:
            subject = known[0]
    values = {"name": "there", "company": "your team"}
    values.update({k: str(v) for k, v in (vars or {}).items() if not isinstance(v, (dict, list))})
    subject = Template(subject).safe_substitute(values)
    body = Template(body).safe_substitute(values)
    args = {"to": to, "template": template, "subject": subject, "body": body, "vars": vars}

    def perform(conn: Any) -> dict[str, Any]:
        n, message_id = store.next_id(conn, "outbox", "msg")
        conn.execute("INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (n, message_id, to, template, subject, body, store.dumps(vars or {}), store.run_id(ctx),
                      store.idempotency_key(ctx)))
        return {"message_id": message_id}

    return store.once(ctx, "email.send", args, perform)
