"""The embedded demo world: its actions, its store and its agreement with the local model."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import sealflow.demo as demo
from sealflow.core.errors import StepError
from sealflow.demo import seed
from sealflow.execution.actions import REGISTRY
from sealflow.providers import PROVIDERS, ModelRequest

ROOT = Path(__file__).resolve().parents[3]

LEAD_SCHEMA = {
    "type": "object",
    "required": ["classification", "reason"],
    "properties": {"classification": {"enum": ["high", "medium", "low"]}, "reason": {"type": "string"}},
}


@pytest.fixture(autouse=True)
def db(tmp_path):
    path = demo.configure(tmp_path / "demo.db")
    yield path
    demo.configure(None)


def ctx(key: str | None = None, run_id: str = "run_1") -> SimpleNamespace:
    return SimpleNamespace(idempotency_key=key, run_id=run_id)


def call(name: str, key: str | None = None, **args):
    return REGISTRY.get(name)(ctx(key), **args)


def fails(error_class: str, name: str, key: str | None = None, **args) -> StepError:
    with pytest.raises(StepError) as info:
        call(name, key, **args)
    assert info.value.error_class == error_class, info.value
    return info.value


# --- registration ----------------------------------------------------------------------------

ACTIONS = {
    "crm.get_lead": (("crm:read",), "read"),
    "crm.add_note": (("crm:write",), "write"),
    "email.send": (("email:send",), "irreversible"),
    "docs.fetch": (("docs:read",), "read"),
    "docs.extract_pdf": (("docs:read", "docs:write"), "write"),
    "docs.extract_text": (("docs:read", "docs:write"), "write"),
    "docs.chunk": (("docs:read", "docs:write"), "write"),
    "docs.set_status": (("docs:write",), "write"),
    "embeddings.create": (("embeddings:invoke",), "read"),
    "index.upsert": (("index:write",), "write"),
    "index.delete_stale": (("index:write",), "write"),
    "images.validate": (("uploads:read",), "read"),
    "images.quarantine": (("quarantine:write",), "write"),
    "images.scan": (("malware:scan",), "read"),
    "images.process": (("images:process",), "write"),
    "images.publish": (("cdn:publish",), "irreversible"),
    "images.reject": (("quarantine:write",), "write"),
    "storage.put": (("storage:write",), "irreversible"),
    "storage.delete": (("storage:write",), "write"),
    "notifications.send": (("notify:send",), "irreversible"),
    "tickets.get": (("tickets:read",), "read"),
    "tickets.history": (("tickets:read",), "read"),
    "tickets.update": (("tickets:write",), "write"),
    "tickets.reply": (("tickets:reply",), "irreversible"),
    "tickets.assign": (("tickets:write",), "write"),
    "orders.lookup": (("orders:read",), "read"),
    "kb.search": (("kb:read",), "read"),
    "metrics.query": (("metrics:read",), "read"),
    "incidents.list": (("incidents:read",), "read"),
    "reports.archive": (("reports:write",), "irreversible"),
}


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_importing_the_demo_registers_each_action_with_its_permissions_and_effect(name):
    act = REGISTRY.get(name)
    assert act is not None and (act.permissions, act.effect) == ACTIONS[name]
    assert act.description and act.fn.__module__.startswith("sealflow.demo.")


def _definition_action_uses():
    for path in sorted((ROOT / "definitions").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for step in doc.get("steps", []):
            if "action" in step:
                yield path.name, step["action"], step
            if "compensate" in step:
                yield path.name, step["compensate"]["action"], None
            for tool in (step.get("agent") or {}).get("tools", []):
                yield path.name, tool, {"permissions": step.get("permissions", []), "agent": True}


@pytest.mark.parametrize("where, name, step", list(_definition_action_uses()))
def test_every_action_the_example_definitions_name_exists_and_fits_its_step(where, name, step):
    act = REGISTRY.get(name)
    assert act is not None, f"{where} calls {name!r}, which the demo does not provide"
    if step is None:  # a compensation: only the workflow's permissions apply
        return
    assert set(act.permissions) <= set(step.get("permissions", [])), (where, name)
    if act.effect == "irreversible":
        assert step.get("idempotency_key"), (where, name)
    if step.get("agent"):
        assert act.effect == "read", "agent tools in the examples only read"
    args = set(step.get("with", {}))
    assert args <= set(act.parameters), (where, name, args - set(act.parameters))


# --- the store -------------------------------------------------------------------------------

def test_the_database_lives_where_configured_and_is_seeded_on_first_use(db):
    assert demo.db_path() == db and not db.exists()
    call("crm.get_lead", lead_id="lead_acme")
    assert db.exists()
    count = sqlite3.connect(db).execute("SELECT COUNT(*) FROM leads").fetchone()[0]
    assert count == len(seed.LEADS) >= 5


def test_the_environment_variable_applies_when_nothing_is_configured(tmp_path, monkeypatch):
    monkeypatch.setenv("SEALFLOW_DEMO_DB", str(tmp_path / "env.db"))
    demo.configure(None)
    assert demo.db_path() == tmp_path / "env.db"
    demo.configure(tmp_path / "explicit.db")
    assert demo.db_path() == tmp_path / "explicit.db"
    monkeypatch.delenv("SEALFLOW_DEMO_DB")
    demo.configure(None)
    assert demo.db_path() == Path(".sealflow") / "demo.db"


def test_reset_forgets_effects_and_seeds_again():
    call("crm.add_note", "k1", lead_id="lead_acme", note="hello")
    call("email.send", "k2", to="a@b.example", template="welcome")
    demo.reset()
    assert demo.notes("lead_acme") == [] and demo.outbox() == []
    assert call("crm.get_lead", lead_id="lead_acme")["company"] == "Acme Corporation"
    assert call("crm.add_note", "k1", lead_id="lead_acme", note="again")["note_id"] == "note_000001"
    assert [n["note"] for n in demo.notes("lead_acme")] == ["again"]


# --- CRM and email ---------------------------------------------------------------------------

def test_get_lead_returns_the_record():
    lead = call("crm.get_lead", lead_id="lead_acme")
    assert lead["lead_id"] == "lead_acme" and lead["email"] == "ada.park@acme.example"
    assert {"company", "employees", "budget_usd", "notes", "name"} <= set(lead)
    assert all(re.match(r"^lead_[a-z0-9]+$", lead["lead_id"]) for lead in seed.LEADS)


def test_an_unknown_lead_is_invalid_request():
    assert fails("invalid_request", "crm.get_lead", lead_id="lead_x").message == "no lead 'lead_x' in the demo CRM"


@pytest.mark.parametrize("lead_id, label", [
    ("lead_acme", "high"), ("lead_globex", "high"), ("lead_midco", "medium"), ("lead_initech", "medium"),
    ("lead_quietco", "medium"), ("lead_bobsbikes", "low"), ("lead_tinycafe", "low"),
])
def test_seeded_leads_classify_as_documented(lead_id, label):
    # Given the example's prompt: the fetched record interpolated as compact JSON
    lead = call("crm.get_lead", lead_id=lead_id)
    prompt = "Classify this lead: " + json.dumps(lead, separators=(",", ":"), ensure_ascii=False)
    # When the default model classifies it
    out = PROVIDERS.get("default").complete(ModelRequest("default", prompt, output_schema=LEAD_SCHEMA)).output
    # Then the label is the documented one and there is a reason
    assert out["classification"] == label and out["reason"]


def test_add_note_runs_once_per_idempotency_key():
    first = call("crm.add_note", "run_1:record", lead_id="lead_acme", note="high value")
    again = call("crm.add_note", "run_1:record", lead_id="lead_acme", note="high value")
    assert first == again == {"note_id": "note_000001"}
    assert [n["note"] for n in demo.notes("lead_acme")] == ["high value"]
    other = call("crm.add_note", "run_2:record", lead_id="lead_acme", note="second")
    assert other["note_id"] != first["note_id"] and len(demo.notes("lead_acme")) == 2
    assert demo.notes("lead_acme")[0]["run_id"] == "run_1"


def test_add_note_without_a_key_adds_every_time_and_checks_the_lead():
    call("crm.add_note", lead_id="lead_midco", note="a")
    call("crm.add_note", lead_id="lead_midco", note="a")
    assert len(demo.notes("lead_midco")) == 2
    fails("invalid_request", "crm.add_note", "k", lead_id="lead_nobody", note="x")
    fails("invalid_request", "crm.add_note", "k", lead_id="lead_midco", note="  ")


def test_email_send_writes_the_outbox_once_per_idempotency_key():
    first = call("email.send", "run_1:follow_up", to="ada.park@acme.example", template="sales_followup",
                 vars={"name": "Ada", "company": "Acme Corporation"})
    again = call("email.send", "run_1:follow_up", to="ada.park@acme.example", template="sales_followup")
    assert first == again and first["message_id"].startswith("msg_")
    [mail] = demo.outbox()
    assert mail["to"] == "ada.park@acme.example" and mail["template"] == "sales_followup"
    assert "Hello Ada" in mail["body"] and "Acme Corporation" in mail["body"]
    second = call("email.send", "run_2:follow_up", to="ada.park@acme.example", template="sales_followup")
    assert second != first and len(demo.outbox()) == 2


def test_concurrent_sends_with_one_key_send_once():
    results = []

    def send():
        results.append(call("email.send", "same-key", to="x@y.example", template="welcome"))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r["message_id"] for r in results}) == 1 and len(demo.outbox()) == 1


def test_email_send_refuses_bad_input():
    fails("invalid_request", "email.send", "k", to="not-an-address", template="welcome")
    fails("invalid_request", "email.send", "k", to="a@b.example", template="no_such_template")
    assert call("email.send", "k", to="a@b.example", template="custom", subject="Hi", body="Text")
    assert demo.outbox()[0]["subject"] == "Hi"


def test_the_weekly_report_template_renders_the_composed_report():
    report = {"week": 2900, "headline": "A calm week", "status": "green", "highlights": ["Fewer retries"],
              "risks": [{"title": "Provider quota", "severity": "medium"}], "tokens": 1000, "cost_usd": 0.5,
              "runs": 40, "failed_runs": 1, "incidents": 0}
    call("email.send", "weekly-report:2900", to="ai-weekly@example.com", template="weekly_ai_report", vars=report,
         subject="AI in production, week 2900: A calm week")
    [mail] = demo.outbox()
    assert "- Fewer retries" in mail["body"] and "[medium] Provider quota" in mail["body"]
    assert "runs: 40 (1 failed)" in mail["body"] and mail["vars"] == report


# --- documents -------------------------------------------------------------------------------

def test_the_document_ingestion_path_indexes_a_revision_and_prunes_older_ones():
    # Given revisions 1 and 2 of the handbook indexed one after the other
    for rev in (1, 2):
        doc = call("docs.fetch", document_id="doc_handbook", revision=rev)
        assert doc["content_type"] == "text/markdown"
        call("docs.extract_text", document_id="doc_handbook", revision=rev, blob_key=doc["blob_key"],
             content_type=doc["content_type"])
        chunks = call("docs.chunk", document_id="doc_handbook", revision=rev, max_tokens=512, overlap=64)
        assert chunks["chunk_count"] >= 2 and chunks["preview"].startswith("# Employee handbook")
        vectors = call("embeddings.create", chunks_key=chunks["chunks_key"], model="text-embedding-small",
                       batch_size=64)
        assert vectors["count"] == chunks["chunk_count"] and vectors["batches"] == 1
        up = call("index.upsert", f"idx:{rev}", namespace="kb-internal", document_id="doc_handbook", revision=rev,
                  vectors_key=vectors["vectors_key"], metadata={"title": doc["title"]})
        assert up["upserted"] == vectors["count"]
    # When the stale revisions are pruned
    pruned = call("index.delete_stale", "prune:2", namespace="kb-internal", document_id="doc_handbook",
                  keep_revision=2)
    # Then only revision 2 is left
    assert pruned["deleted"] > 0
    assert {r["revision"] for r in demo.rows("index_entries")} == {2}
    status = call("docs.set_status", "s", document_id="doc_handbook", revision=2, status="indexed", detail="ok")
    assert status["status"] == "indexed"


def test_chunks_are_embedded_one_by_one_for_a_map_and_match_the_batch_embedding():
    # Given a chunked revision, whose chunk positions are the map's items
    doc = call("docs.fetch", document_id="doc_handbook", revision=1)
    call("docs.extract_text", document_id="doc_handbook", revision=1, blob_key=doc["blob_key"],
         content_type=doc["content_type"])
    chunks = call("docs.chunk", document_id="doc_handbook", revision=1, max_tokens=512, overlap=64)
    assert chunks["chunks"] == list(range(chunks["chunk_count"]))
    # When each chunk is embedded on its own (twice for the first: a retry writes it again)
    for index in [0, *chunks["chunks"]]:
        got = call("embeddings.embed_chunk", chunks_key=chunks["chunks_key"], index=index)
        assert got["index"] == index and got["dimensions"] == 8
    # Then there is one vector per chunk, the same as the batch embedding gives
    one_by_one = {r["idx"]: r["vector"] for r in demo.rows("vectors")}
    assert sorted(one_by_one) == chunks["chunks"]
    call("embeddings.create", chunks_key=chunks["chunks_key"], model="text-embedding-small")
    assert {r["idx"]: r["vector"] for r in demo.rows("vectors")} == one_by_one
    fails("invalid_request", "embeddings.embed_chunk", chunks_key=chunks["chunks_key"], index=999)


def test_pdf_html_and_unsupported_documents():
    pdf = call("docs.fetch", document_id="doc_pricing", revision=1)
    out = call("docs.extract_pdf", document_id="doc_pricing", revision=1, blob_key=pdf["blob_key"], ocr=True)
    assert out["pages"] >= 1 and out["chars"] > 0
    html = call("docs.fetch", document_id="doc_releasenotes", revision=1)
    call("docs.extract_text", document_id="doc_releasenotes", revision=1, blob_key=html["blob_key"],
         content_type="text/html")
    text = demo.rows("doc_texts", document_id="doc_releasenotes")[0]["text"]
    assert "<" not in text and "retry_after & jitter" in text
    assert call("docs.fetch", document_id="doc_brandlogo", revision=1)["content_type"] == "image/svg+xml"
    fails("invalid_request", "docs.fetch", document_id="doc_missing", revision=1)
    fails("invalid_request", "docs.fetch", document_id="doc_pricing", revision=3)
    fails("invalid_request", "docs.chunk", document_id="doc_handbook", revision=1)  # nothing extracted yet
    fails("configuration", "embeddings.create", chunks_key="chunks/x", model="no-such-model")
    fails("invalid_request", "index.upsert", "k", namespace="kb-private", document_id="doc_pricing", revision=1,
          vectors_key="v")


# --- images ----------------------------------------------------------------------------------

VARIANTS = [{"name": "thumbnail", "width": 256, "height": 256, "fit": "cover"},
            {"name": "medium", "width": 1024, "fit": "inside"}, {"name": "large", "width": 2048, "fit": "inside"}]


def _validated(object_key: str, declared: str = "image/jpeg"):
    return call("images.validate", object_key=object_key, declared_type=declared, max_bytes=26214400,
                max_pixels=50000000)


def test_the_image_pipeline_stores_publishes_and_notifies_once():
    v = _validated("uploads/usr_alice/sunset.jpg")
    q = call("images.quarantine", "img:q", image_id="img_alice01", object_key=v["object_key"], sha256=v["sha256"])
    assert call("images.scan", quarantine_key=q["quarantine_key"])["verdict"] == "clean"
    p = call("images.process", quarantine_key=q["quarantine_key"], variants=VARIANTS, strip_metadata=True)
    sizes = {x["name"]: (x["width"], x["height"]) for x in p["variants"]}
    assert sizes == {"thumbnail": (256, 256), "medium": (1024, 768), "large": (2048, 1536)}
    assert "http" in p["preview_url"] and p["preview_url"].endswith("/medium.jpg")
    s = call("storage.put", "img:store", image_id="img_alice01", version=v["sha256"], variants=p["variants"],
             metadata={"alt_text": "A sunset"})
    args = dict(image_id="img_alice01", version=v["sha256"], keys=s["keys"], alt_text="A sunset")
    first = call("images.publish", "img:publish", **args)
    assert call("images.publish", "img:publish", **args) == first and len(demo.publications()) == 1
    assert first["url"].startswith("https://cdn.demo.invalid/")
    n = call("notifications.send", "img:notify", user_id="usr_alice", template="image_published",
             data={"url": first["url"]})
    assert call("notifications.send", "img:notify", user_id="usr_alice", template="image_published") == n
    assert len(demo.notifications()) == 1
    assert call("storage.delete", image_id="img_alice01", version=v["sha256"])["deleted"] == 3


def test_malware_is_policy_denied_and_the_upload_can_be_rejected():
    v = _validated("uploads/usr_mallory/invoice.jpg")
    q = call("images.quarantine", "m:q", image_id="img_mallory1", object_key=v["object_key"], sha256=v["sha256"])
    assert "Demo.EICAR" in fails("policy_denied", "images.scan", quarantine_key=q["quarantine_key"]).message
    fails("policy_denied", "images.process", quarantine_key=q["quarantine_key"], variants=VARIANTS)
    out = call("images.reject", "m:r", image_id="img_mallory1", quarantine_key=q["quarantine_key"],
               reason="policy_denied", retain_days=90)
    assert out["status"] == "rejected" and demo.rows("quarantine")[0]["status"] == "rejected"


def test_uploads_that_break_the_limits_are_invalid_request():
    fails("invalid_request", "images.validate", object_key="uploads/usr_erin/renamed.jpg",
          declared_type="image/jpeg", max_bytes=10**8, max_pixels=10**9)
    fails("invalid_request", "images.validate", object_key="uploads/usr_dave/panorama.png",
          declared_type="image/png", max_bytes=26214400, max_pixels=50000000)
    fails("invalid_request", "images.validate", object_key="uploads/nobody/x.jpg", declared_type="image/jpeg",
          max_bytes=1, max_pixels=1)
    fails("invalid_request", "images.publish", "k", image_id="img_x", version="v", keys=["images/img_x/v/a.jpg"],
          alt_text="x")


# --- support desk ----------------------------------------------------------------------------

def test_the_support_desk_tools_read_and_the_reply_posts_once():
    ticket = call("tickets.get", ticket_id="tkt_1001")
    assert ticket["customer_id"] == "cus_0042" and "ord_5521" in ticket["body"]
    assert call("orders.lookup", order_id="ord_5521")["orders"][0]["status"] == "shipped"
    assert call("orders.lookup", customer_id="cus_0042")["count"] == 1
    hits = call("kb.search", query="where is my order tracking shipping")["results"]
    assert hits[0]["article_id"] == "kb_shipping_times"
    history = call("tickets.history", customer_id="cus_0042")
    assert {t["ticket_id"] for t in history["tickets"]} == {"tkt_1001", "tkt_1003", "tkt_0901"}
    call("tickets.update", "t:label", ticket_id="tkt_1001", category="shipping", priority="normal",
         tags=["auto-triaged"])
    first = call("tickets.reply", "t:reply", ticket_id="tkt_1001", body="It ships soon.", visibility="public")
    assert call("tickets.reply", "t:reply", ticket_id="tkt_1001", body="It ships soon.") == first
    assert len(demo.replies("tkt_1001")) == 1
    after = call("tickets.get", ticket_id="tkt_1001")
    assert (after["category"], after["tags"], after["status"]) == ("shipping", ["auto-triaged"], "answered")
    call("tickets.assign", "t:esc", ticket_id="tkt_1002", queue="tier2", note="handed over")
    assert call("tickets.get", ticket_id="tkt_1002")["queue"] == "tier2"
    fails("invalid_request", "tickets.get", ticket_id="tkt_nope")
    fails("invalid_request", "tickets.update", "k", ticket_id="tkt_1001", category="weird", priority="low")


# --- operations reporting --------------------------------------------------------------------

WEEK = 7 * 24 * 3600


def test_metrics_and_incidents_are_deterministic_per_window():
    since, until = 2900 * WEEK, 2901 * WEEK
    usage = call("metrics.query", metric="llm_usage", since=since, until=until, group_by=["workflow", "model"])
    assert usage == call("metrics.query", metric="llm_usage", since=since, until=until, group_by=["workflow", "model"])
    assert usage["totals"]["tokens"] == sum(r["tokens"] for r in usage["rows"]) > 0
    runs = call("metrics.query", metric="workflow_runs", since=since, until=until, group_by=["workflow", "status"])
    assert runs["totals"]["failed"] == sum(r["runs"] for r in runs["rows"] if r["status"] == "failed")
    other = call("metrics.query", metric="llm_usage", since=since + WEEK, until=until + WEEK, group_by=[])
    assert other["rows"] == [{k: v for k, v in other["totals"].items() if k != "failed"}]
    incidents = call("incidents.list", since=since, until=until, min_severity="sev3")
    assert incidents == call("incidents.list", since=since, until=until, min_severity="sev3")
    assert all(i["severity"] in ("sev1", "sev2", "sev3") for i in incidents["items"])
    assert incidents["count"] == len(incidents["items"])
    fails("invalid_request", "metrics.query", metric="nope", since=since, until=until)
    fails("invalid_request", "metrics.query", metric="llm_usage", since=until, until=since)


def test_reports_are_archived_once_per_key():
    first = call("reports.archive", "weekly-report:2900:archive", kind="weekly-ai-report", period=2900,
                 report={"headline": "calm"}, message_id="msg_000001")
    assert call("reports.archive", "weekly-report:2900:archive", kind="weekly-ai-report", period=2900,
                report={"headline": "calm"}) == first
    assert [r["report"] for r in demo.archived_reports()] == [{"headline": "calm"}]
