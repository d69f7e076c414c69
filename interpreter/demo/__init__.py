"""The embedded demo world: the actions the example workflows call, with no service and no key.

Importing this package registers the actions below on :data:`sealflow.execution.actions.REGISTRY`.
State lives in one SQLite file: the path given to :func:`configure`, else the environment
variable ``SEALFLOW_DEMO_DB``, else ``.sealflow/demo.db``; it is created and seeded on first
use (seed data: :mod:`sealflow.demo.seed`). Everything is deterministic and offline.
Actions marked *once* run at most once per ``ctx.idempotency_key``: a repeat returns the
first result and changes nothing. Actions use only ``ctx.idempotency_key`` and ``ctx.run_id``.

Each action: ``name(arguments) -> returns`` [permissions] effect. ``?`` marks an optional
argument; *once* means idempotent by ``ctx.idempotency_key``.

CRM and email (:mod:`.actions`, the lead-qualification example):

- ``crm.get_lead(lead_id) -> {lead_id, name, title, company, email, industry, country,
  employees, budget_usd, notes}`` [crm:read] read
- ``crm.add_note(lead_id, note) -> {note_id}`` [crm:write] write, once
- ``email.send(to, template, subject?, body?, vars?) -> {message_id}`` [email:send]
  irreversible, once; templates ``sales_followup``, ``welcome``, ``weekly_ai_report`` (or
  give subject and body)

Documents, embeddings, index (:mod:`.docs`, the document-ingestion example):

- ``docs.fetch(document_id, revision) -> {document_id, revision, title, content_type,
  blob_key, source_url, size_bytes}`` [docs:read] read
- ``docs.extract_pdf(document_id, revision, blob_key, ocr?) -> {document_id, revision,
  text_key, chars, pages}`` [docs:read, docs:write] write
- ``docs.extract_text(document_id, revision, blob_key, content_type) -> {document_id,
  revision, text_key, chars}`` [docs:read, docs:write] write
- ``docs.chunk(document_id, revision, max_tokens?, overlap?) -> {chunks_key, chunk_count,
  preview}`` [docs:read, docs:write] write
- ``embeddings.create(chunks_key, model?, batch_size?) -> {vectors_key, count, dimensions,
  batches, model}`` [embeddings:invoke] read; models ``text-embedding-small``,
  ``text-embedding-large``
- ``index.upsert(namespace, document_id, revision, vectors_key, metadata?) -> {namespace,
  document_id, revision, upserted}`` [index:write] write, once; namespaces ``kb-public``,
  ``kb-internal``
- ``index.delete_stale(namespace, document_id, keep_revision) -> {namespace, document_id,
  kept_revision, deleted}`` [index:write] write, once
- ``docs.set_status(document_id, revision, status, detail?) -> {document_id, revision,
  status, detail}`` [docs:write] write, once

Images (:mod:`.media`, the image-upload-pipeline example):

- ``images.validate(object_key, declared_type, max_bytes, max_pixels) -> {object_key,
  sha256, width, height, bytes, content_type}`` [uploads:read] read
- ``images.quarantine(image_id, object_key, sha256) -> {quarantine_key, image_id, sha256}``
  [quarantine:write] write, once
- ``images.scan(quarantine_key) -> {quarantine_key, verdict, engine}`` [malware:scan] read;
  malware is ``policy_denied``
- ``images.process(quarantine_key, variants, strip_metadata?) -> {variants: [{name, key,
  width, height, bytes}], preview_url, metadata_stripped}`` [images:process] write
- ``storage.put(image_id, version, variants, metadata?) -> {image_id, version, keys}``
  [storage:write] irreversible, once
- ``storage.delete(image_id, version) -> {image_id, version, deleted}`` [storage:write]
  write (the compensation of ``storage.put``)
- ``images.publish(image_id, version, keys, alt_text) -> {publication_id, image_id, url,
  urls}`` [cdn:publish] irreversible, once
- ``images.reject(image_id, quarantine_key, reason, retain_days?) -> {image_id,
  quarantine_key, status, reason, retain_days}`` [quarantine:write] write, once
- ``images.generate(prompt, size?) -> {job_id}`` [images:generate] write, once: queues a render at
  the demo provider, which keeps the step's callback URL and token (``render_jobs``) and calls
  back (the image-generation example)
- ``images.request_scan(image_url) -> {scan_id}`` [malware:scan] write, once: the demo scanner
  answers later with a ``scan.finished`` event (``scan_requests``)
- ``notifications.send(user_id, template, data?) -> {notification_id}`` [notify:send]
  irreversible, once; templates ``image_published``, ``image_rejected``, ``report_ready``

Support desk (:mod:`.support`, the support-triage example; the agent's tools only read):

- ``tickets.get(ticket_id) -> {ticket_id, customer_id, customer_name, subject, body, status,
  channel, category, priority, tags, queue}`` [tickets:read] read
- ``tickets.history(customer_id, limit?) -> {customer_id, tickets: [{ticket_id, subject,
  status, category}], count}`` [tickets:read] read
- ``orders.lookup(order_id?, customer_id?) -> {orders, count}`` [orders:read] read
- ``kb.search(query, limit?) -> {results: [{article_id, title, snippet, score}], count}``
  [kb:read] read
- ``tickets.update(ticket_id, category, priority, tags?) -> {ticket_id, category, priority,
  tags}`` [tickets:write] write, once
- ``tickets.reply(ticket_id, body, visibility?) -> {reply_id, ticket_id, visibility}``
  [tickets:reply] irreversible, once (a public reply reaches the customer)
- ``tickets.assign(ticket_id, queue, note?) -> {ticket_id, queue, status}`` [tickets:write]
  write, once; queues ``tier1``, ``tier2``, ``billing``, ``on-call``

Operations reporting (:mod:`.reports`, the weekly-report example):

- ``metrics.query(metric, since, until, group_by?) -> {metric, since, until, rows, totals}``
  [metrics:read] read; metrics ``llm_usage`` (calls, input_tokens, output_tokens, tokens,
  cost_usd by workflow, model) and ``workflow_runs`` (runs by workflow, status; totals add
  ``failed``)
- ``incidents.list(since, until, min_severity?) -> {items: [{incident_id, severity, title,
  workflow, started_at, duration_minutes}], count}`` [incidents:read] read
- ``reports.archive(kind, period, report, message_id?) -> {archive_id, kind, period}``
  [reports:write] irreversible, once

Failures are classified: unknown records and malformed arguments are ``invalid_request``
(e.g. ``no lead 'lead_x' in the demo CRM``), an unknown embedding model is
``configuration``, malware is ``policy_denied``.

Helpers for tests and for ``sealflow`` to show what the demo did: :func:`configure`,
:func:`db_path`, :func:`reset`, :func:`outbox`, :func:`notes`, :func:`notifications`,
:func:`publications`, :func:`replies`, :func:`archived_reports`, :func:`rows` (any demo table).
"""

from __future__ import annotations

import os
from typing import Any

from sealflow.demo import actions, docs, media, reports, support  # noqa: F401  (importing registers the actions)
from sealflow.demo.store import TABLES, configure, db_path, reset, rows

__all__ = ["configure", "db_path", "reset", "outbox", "notes", "notifications", "publications", "replies",
           "archived_reports", "rows", "TABLES"]


def outbox(path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every email ``email.send`` wrote, oldest first: message_id, to, template, subject, body, vars, run_id."""
    return rows("outbox", path)


def notes(lead_id: str, path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The notes ``crm.add_note`` added to ``lead_id``, oldest first: note_id, note, run_id."""
    return rows("lead_notes", path, lead_id=lead_id)


def notifications(path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every notification ``notifications.send`` wrote, oldest first."""
    return rows("notifications", path)


def publications(path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every CDN publication ``images.publish`` made, oldest first."""
    return rows("publications", path)


def replies(ticket_id: str | None = None, path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Replies and internal notes posted on tickets (all, or ``ticket_id``'s), oldest first."""
    return rows("ticket_replies", path) if ticket_id is None else rows("ticket_replies", path, ticket_id=ticket_id)


def archived_reports(path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every report ``reports.archive`` kept, oldest first."""
    return rows("report_archive", path)
