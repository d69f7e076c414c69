"""What is posted to each kind of channel: the request body and headers of one delivery.

* ``webhook``: the payload as JSON, signed per Standard Webhooks: ``webhook-id`` (the delivery's id, stable
  across retries so the receiver can deduplicate), ``webhook-timestamp`` (this attempt's time) and
  ``webhook-signature`` = ``v1,`` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")), the key being the
  base64-decoded ``whsec_`` secret (:mod:`sealflow.core.webhooks`, the same scheme
  ``POST /v1/events`` verifies).
* ``slack``: a Slack incoming-webhook body: ``text`` (the summary, also the notification's fallback) and
  ``blocks`` (the summary, the facts, a button to the approvals page when ``public_url`` is set).
"""

from __future__ import annotations

import json
from typing import Any

from sealflow.core.webhooks import decode_secret, signature


def webhook(delivery_id: str, payload: dict[str, Any], secret: str, timestamp: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    signed = signature(decode_secret(secret), delivery_id, timestamp, body)
    return body, {"content-type": "application/json", "webhook-id": delivery_id,
                  "webhook-timestamp": str(timestamp), "webhook-signature": signed}


def _plain(text: Any) -> str:
    """Text safe inside Slack mrkdwn: its three control characters escaped."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    d = payload.get("data") or {}
    facts = [("Workflow", f"{d.get('workflow')} v{d.get('version')}"), ("Run", d.get("run_id")),
             ("Step", d.get("step")), ("Tenant", d.get("tenant")), ("Started by", d.get("initiator"))]
    if payload.get("type") == "outcome_unknown.requested":  # a lost attempt's outcome (engine/poison.py)
        facts += [("Action", d.get("action")), ("Observed", d.get("observed")),
                  ("Decide with", f"sealflow resolve {d.get('run_id')}"), ("Expires", d.get("expires_at") or "never")]
    else:
        facts += [("Approvers", f"{', '.join(d.get('approvers') or ())} (quorum {d.get('quorum')})"),
                  ("Expires", d.get("expires_at") or "never"), ("Payload hash", d.get("show_hash"))]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{_plain(d.get('summary', 'Approval needed'))}*"}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{name}*\n{_plain(value)}"}
                                       for name, value in facts]},
    ]
    if d.get("url"):
        blocks.append({"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": "Review and decide"}, "url": d["url"],
             "style": "primary"}]})
    body = {"text": str(d.get("summary", "Approval needed")), "blocks": blocks}
    return json.dumps(body, ensure_ascii=False).encode(), {"content-type": "application/json"}
