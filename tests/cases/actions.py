"""Demo actions for the data-driven cases that need action metadata.

Loaded by cases that carry ``# actions: tests/cases/actions.py`` (see README.md),
through ``sealflow.cli.actions_loader.load_actions``, exactly as ``--actions`` loads a file.
The names live under ``cases.`` so that they never collide with the project's own
demo actions (``crm.*``, ``email.*``) registered in the same process.

They are declarations first: the compiler reads their permissions and effects
(C410 irreversible without idempotency_key, C411 unknown action, C413 missing
permission). The bodies are small, deterministic and touch nothing outside.
"""

from __future__ import annotations

from typing import TypedDict

from sealflow import action


@action("cases.get_lead", permissions=["crm:read"], effect="read")
def get_lead(ctx, lead_id: str) -> dict:
    """Return a fixed lead record."""
    return {"id": lead_id, "email": f"{lead_id}@example.com", "score": 42, "status": "new"}


@action("cases.add_note", permissions=["crm:write"], effect="write")
def add_note(ctx, lead_id: str, note: str) -> dict:
    """Pretend to add a note to a lead; return its id."""
    return {"lead_id": lead_id, "note_id": f"note-{ctx.idempotency_key or ctx.run_id}", "note": note}


@action("cases.send_email", permissions=["email:send"], effect="irreversible")
def send_email(ctx, to: str, template: str) -> dict:
    """Pretend to send an email; an irreversible effect."""
    return {"to": to, "template": template, "message_id": f"msg-{ctx.idempotency_key}"}


class Score(TypedDict):
    """What cases.score_lead returns: its fields are known, so a misspelt one is X311."""

    score: int
    grade: str


@action("cases.score_lead", permissions=["crm:read"], effect="read")
def score_lead(ctx, lead_id: str, weight: float = 1.0) -> Score:
    """Return a fixed score for a lead."""
    return {"score": int(42 * weight), "grade": "B"}
