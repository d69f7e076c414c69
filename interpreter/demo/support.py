"""Demo helpdesk, orders and knowledge base (``tickets.*``, ``orders.lookup``, ``kb.search``).

What the support-triage example calls. The agent's tools (``kb.search``,
``orders.lookup``, ``tickets.history``) only read; ``tickets.update`` and
``tickets.assign`` write and ``tickets.reply`` (a public reply) is irreversible, all
three at most once per ``ctx.idempotency_key``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sealflow.core.errors import StepError
from sealflow.demo import store
from sealflow.execution.actions import action

CATEGORIES = ("billing", "shipping", "account", "product", "other")
PRIORITIES = ("low", "normal", "high", "urgent")
QUEUES = ("tier1", "tier2", "billing", "on-call")


def _ticket(conn: Any, ticket_id: Any) -> dict[str, Any]:
    row = conn.execute("SELECT record FROM tickets WHERE ticket_id = ?", (str(ticket_id),)).fetchone()
    if row is None:
        raise StepError("invalid_request", f"no ticket {ticket_id!r} in the demo helpdesk")
    ticket: dict[str, Any] = json.loads(row["record"])
    return ticket


def _save(conn: Any, ticket: dict[str, Any]) -> None:
    conn.execute("UPDATE tickets SET record = ? WHERE ticket_id = ?", (store.dumps(ticket), ticket["ticket_id"]))


@action("tickets.get", permissions=["tickets:read"], effect="read")
def get_ticket(ctx: Any, ticket_id: str) -> dict[str, Any]:
    """The ticket: ticket_id, customer_id, customer_name, subject, body, status, channel, category,
    priority, tags, queue."""
    with store.connect() as conn:
        return _ticket(conn, ticket_id)


@action("tickets.history", permissions=["tickets:read"], effect="read")
def history(ctx: Any, customer_id: str, limit: int = 10) -> dict[str, Any]:
    """The customer's tickets, newest id first: {tickets: [{ticket_id, subject, status, category}], count}."""
    with store.connect() as conn:
        found = [json.loads(r["record"]) for r in conn.execute("SELECT record FROM tickets ORDER BY ticket_id DESC")]
    mine = [{k: t[k] for k in ("ticket_id", "subject", "status", "category")}
            for t in found if t["customer_id"] == customer_id][:max(0, int(limit))]
    return {"customer_id": customer_id, "tickets": mine, "count": len(mine)}


@action("orders.lookup", permissions=["orders:read"], effect="read")
def lookup(ctx: Any, order_id: str | None = None, customer_id: str | None = None) -> dict[str, Any]:
    """Orders by ``order_id`` or by ``customer_id``: {orders: [order records], count}."""
    if not order_id and not customer_id:
        raise StepError("invalid_request", "orders.lookup needs an order_id or a customer_id")
    with store.connect() as conn:
        if order_id:
            rows = conn.execute("SELECT record FROM orders WHERE order_id = ?", (str(order_id),)).fetchall()
            if not rows:
                raise StepError("invalid_request", f"no order {order_id!r} in the demo shop")
        else:
            rows = conn.execute("SELECT record FROM orders WHERE customer_id = ? ORDER BY order_id",
                                (str(customer_id),)).fetchall()
    orders = [json.loads(r["record"]) for r in rows]
    return {"orders": orders, "count": len(orders)}


@action("kb.search", permissions=["kb:read"], effect="read")
def search(ctx: Any, query: str, limit: int = 3) -> dict[str, Any]:
    """Knowledge-base articles ranked by shared words with ``query``:
    {results: [{article_id, title, snippet, score}], count}."""
    terms = set(re.findall(r"[a-z0-9]+", str(query).lower()))
    with store.connect() as conn:
        articles = [dict(r) for r in conn.execute("SELECT * FROM kb_articles ORDER BY article_id")]
    scored = []
    for a in articles:
        words = set(re.findall(r"[a-z0-9]+", f"{a['title']} {a['body']}".lower()))
        score = len(terms & words)
        if score:
            scored.append({"article_id": a["article_id"], "title": a["title"], "snippet": a["body"][:160],
                           "score": score})
    scored.sort(key=lambda r: (-r["score"], r["article_id"]))
    results = scored[:max(0, int(limit))]
    return {"results": results, "count": len(results)}


@action("tickets.update", permissions=["tickets:write"], effect="write")
def update(ctx: Any, ticket_id: str, category: str, priority: str, tags: list[Any] | None = None) -> dict[str, Any]:
    """Set the ticket's category, priority and (added) tags; returns the new values."""
    if category not in CATEGORIES or priority not in PRIORITIES:
        raise StepError("invalid_request", f"category must be one of {', '.join(CATEGORIES)} and priority one of "
                        f"{', '.join(PRIORITIES)}; got {category!r}, {priority!r}")

    def perform(conn: Any) -> dict[str, Any]:
        ticket = _ticket(conn, ticket_id)
        ticket.update(category=category, priority=priority,
                      tags=sorted(set(ticket.get("tags") or []) | {str(t) for t in tags or []}))
        _save(conn, ticket)
        return {"ticket_id": ticket_id, "category": category, "priority": priority, "tags": ticket["tags"]}

    return store.once(ctx, "tickets.update", {"ticket_id": ticket_id, "category": category, "priority": priority,
                                               "tags": tags}, perform)


@action("tickets.reply", permissions=["tickets:reply"], effect="irreversible")
def reply(ctx: Any, ticket_id: str, body: str, visibility: str = "public") -> dict[str, Any]:
    """Post a reply on the ticket (public: the customer sees it); returns reply_id."""
    if not isinstance(body, str) or not body.strip():
        raise StepError("invalid_request", "a reply needs a body")
    if visibility not in ("public", "internal"):
        raise StepError("invalid_request", f"visibility must be public or internal, not {visibility!r}")

    def perform(conn: Any) -> dict[str, Any]:
        ticket = _ticket(conn, ticket_id)
        n, reply_id = store.next_id(conn, "ticket_replies", "rpl")
        conn.execute("INSERT INTO ticket_replies VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (n, reply_id, ticket_id, body, visibility, store.run_id(ctx), store.idempotency_key(ctx)))
        if visibility == "public":
            ticket["status"] = "answered"
            _save(conn, ticket)
        return {"reply_id": reply_id, "ticket_id": ticket_id, "visibility": visibility}

    return store.once(ctx, "tickets.reply", {"ticket_id": ticket_id, "body": body, "visibility": visibility}, perform)


@action("tickets.assign", permissions=["tickets:write"], effect="write")
def assign(ctx: Any, ticket_id: str, queue: str, note: str | None = None) -> dict[str, Any]:
    """Hand the ticket to a human queue (tier1, tier2, billing, on-call) with an internal note."""
    if queue not in QUEUES:
        raise StepError("invalid_request", f"unknown queue {queue!r}; queues: {', '.join(QUEUES)}")

    def perform(conn: Any) -> dict[str, Any]:
        ticket = _ticket(conn, ticket_id)
        ticket.update(queue=queue, status="assigned")
        _save(conn, ticket)
        if note:
            n, reply_id = store.next_id(conn, "ticket_replies", "rpl")
            conn.execute("INSERT INTO ticket_replies VALUES (?, ?, ?, ?, 'internal', ?, ?)",
                         (n, reply_id, ticket_id, note, store.run_id(ctx), store.idempotency_key(ctx)))
        return {"ticket_id": ticket_id, "queue": queue, "status": "assigned"}

    return store.once(ctx, "tickets.assign", {"ticket_id": ticket_id, "queue": queue, "note": note}, perform)
