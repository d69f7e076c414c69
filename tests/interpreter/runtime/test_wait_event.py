"""A run that hears the world: ``wait: {event: ...}`` takes an event delivered while it waits, or kept from before
it came (the event inbox), once; refuses data its schema does not allow; fails with ``timeout`` when none comes.
On every store."""

from __future__ import annotations

import random

import pytest

from sealflow.dsl.api import compile_bytes
from sealflow.runtime.facade import Runtime

WORKFLOW = b"""\
sealflow: 1
name: scan-wait
version: 1
owner: team:t
input: {schema: {type: object, required: [file_id], properties: {file_id: {type: string}}}}
steps:
  - id: verdict
    wait:
      event: scan.finished
      source: scanner
      match: "event.data.file_id == input.file_id"
      schema: {type: object, required: [file_id, clean], properties: {clean: {type: boolean}}}
      timeout: 1h
    on_error:
      - {errors: [timeout], next: gave_up}
  - id: done
    succeed: {output: "${{ steps.verdict.output }}"}
  - id: gave_up
    fail: {error: timeout, message: no verdict came}
"""


@pytest.fixture
def plan():
    return compile_bytes(WORKFLOW, "<scan-wait>")


@pytest.fixture
def rt(store, registry):
    runtime = Runtime(store, registry, {}, rng=random.Random(3), worker_timeout_ms=20)
    yield runtime
    runtime.close()


def test_an_event_delivered_while_the_run_waits_is_taken_once_and_becomes_the_output(rt, plan):
    # Given a run waiting for the scanner's verdict on file f1
    waiting = rt.run(plan, {"file_id": "f1"}, initiator="user:a")
    assert waiting.state == "waiting" and waiting.waiting["kind"] == "wait"
    # When a verdict for another file arrives, then the one for f1, then the same delivery again
    assert rt.offer_event("default", "scanner", "e0", "scan.finished", {"file_id": "f2", "clean": True}) == []
    (taken,) = rt.offer_event("default", "scanner", "e1", "scan.finished", {"file_id": "f1", "clean": True})
    again = rt.offer_event("default", "scanner", "e1", "scan.finished", {"file_id": "f1", "clean": True})
    # Then only f1's verdict is taken, once, and the run completes with the event's data as the step's output
    assert (taken.run_id, taken.step_id, taken.result) == (waiting.run.id, "verdict", "taken") and again == []
    done = rt.drive(waiting.run.id, until="final")
    assert done.state == "completed" and done.output == {"file_id": "f1", "clean": True}
    (audited,) = [e for e in rt.audit(waiting.run.id) if e.event == "event.taken"]
    assert audited.actor == "event:scanner" and audited.detail["event"]["id"] == "e1"


def test_an_event_that_arrived_before_the_run_reached_its_wait_is_not_lost(rt, plan):
    # Given the verdict on f9 delivered before any run waits for it
    assert rt.offer_event("default", "scanner", "e9", "scan.finished", {"file_id": "f9", "clean": False}) == []
    # When a run for f9 reaches its wait
    done = rt.run(plan, {"file_id": "f9"}, initiator="user:a", until="final")
    # Then it takes the kept event at once
    assert done.state == "completed" and done.output == {"file_id": "f9", "clean": False}


def test_a_matching_event_whose_data_fails_the_schema_is_refused_and_audited_and_the_run_keeps_waiting(rt, plan):
    # Given a run waiting for f1
    waiting = rt.run(plan, {"file_id": "f1"}, initiator="user:a")
    # When a verdict for f1 arrives without its `clean` field
    (refused,) = rt.offer_event("default", "scanner", "bad", "scan.finished", {"file_id": "f1"})
    # Then it is refused, saying why, audited, and the run still waits
    assert refused.result == "refused" and "'clean' is a required property" in refused.error
    assert rt.status(waiting.run.id).state == "waiting"
    (audited,) = [e for e in rt.audit(waiting.run.id) if e.event == "event_refused"]
    assert audited.detail["event"]["id"] == "bad"


def test_another_tenants_or_sources_event_is_never_taken(rt, plan):
    # Given a run of tenant default waiting for the scanner's verdict on f1
    waiting = rt.run(plan, {"file_id": "f1"}, initiator="user:a")
    # When the same verdict comes for another tenant, and from another source of this tenant
    assert rt.offer_event("globex", "scanner", "x1", "scan.finished", {"file_id": "f1", "clean": True}) == []
    assert rt.offer_event("default", "crm", "x2", "scan.finished", {"file_id": "f1", "clean": True}) == []
    # Then the run still waits
    assert rt.status(waiting.run.id).state == "waiting"


def test_no_event_within_the_timeout_fails_the_step_with_timeout_which_on_error_routes(rt, plan, clock):
    # Given a run waiting for a verdict that never comes
    waiting = rt.run(plan, {"file_id": "f7"}, initiator="user:a")
    # When the hour passes
    clock.advance(3601)
    done = rt.drive(waiting.run.id, until="final")
    # Then the wait failed with timeout, not retried, and on_error routed it to its own failure
    steps = [(a.step_id, a.state, a.error_class) for a in done.attempts]
    assert steps == [("verdict", "failed", "timeout"), ("gave_up", "failed", "timeout")]
    assert done.error == ("timeout", "no verdict came")


def test_an_event_delivered_as_the_wait_begins_is_found_by_its_second_look(rt, plan, clock):
    # Given a run whose wait has looked in the inbox and committed its wait (its second look one second later)
    waiting = rt.submit(plan, {"file_id": "f5"}, initiator="user:a")
    status = rt.drive(waiting, sleep_threshold=0.0)
    att = rt.store.active_attempt(waiting)
    assert status.state == "waiting" and att.data.get("recheck") is True
    # When the event is kept in the inbox without being offered to the run (as if it arrived between the look
    # and the commit: offered to the runs waiting then, of which this was not yet one)
    from sealflow.store.inbox import InboxEvent

    rt.store.inbox_put(InboxEvent("default", "scanner", "e5", "scan.finished", {"file_id": "f5", "clean": True},
                                  clock.now()))
    # Then the wait's second look takes it
    done = rt.drive(waiting, until="final")
    assert done.state == "completed" and done.output == {"file_id": "f5", "clean": True}


def test_each_item_of_a_map_waits_for_its_own_event(rt):
    # Given a map whose items each wait for the verdict on their file
    fanned = compile_bytes(b"""\
sealflow: 1
name: many-scans
version: 1
owner: team:t
steps:
  - id: each
    map:
      items: "['f1', 'f2']"
      concurrency: 2
      max_items: 2
      steps:
        - id: verdict
          wait: {event: scan.finished, match: "event.data.file_id == item", timeout: 1h}
""", "<many-scans>")
    waiting = rt.run(fanned, {}, initiator="user:a")
    # When the verdicts come, the second item's first
    (second,) = rt.offer_event("default", "scanner", "v2", "scan.finished", {"file_id": "f2"})
    (first,) = rt.offer_event("default", "scanner", "v1", "scan.finished", {"file_id": "f1"})
    # Then each child run took its own, and the map completed with them in item order
    assert second.run_id.endswith(".each.1") and first.run_id.endswith(".each.0")
    done = rt.drive(waiting.run.id, until="final")
    each = [a for a in done.attempts if a.step_id == "each"][-1]
    assert done.state == "completed" and each.output == [{"file_id": "f1"}, {"file_id": "f2"}]


def test_a_run_cancelled_while_it_waits_takes_no_event_after(rt, plan):
    # Given a run waiting for its verdict, cancelled
    waiting = rt.run(plan, {"file_id": "f1"}, initiator="user:a")
    rt.cancel(waiting.run.id, reason="no longer needed")
    assert rt.drive(waiting.run.id, until="final").state == "cancelled"
    # When the verdict arrives / Then nothing takes it, and the run stays cancelled
    assert rt.offer_event("default", "scanner", "late", "scan.finished", {"file_id": "f1", "clean": True}) == []
    assert rt.status(waiting.run.id).state == "cancelled"


def test_an_event_reaches_every_waiting_run_of_its_type_page_after_page_and_no_run_waiting_for_another(rt, plan,
                                                                                                      monkeypatch):
    # Given five runs waiting for the same file's verdict, read two at a time, and one waiting for another type
    from sealflow.runtime import hearing

    monkeypatch.setattr(hearing, "WAITING_PAGE", 2)
    pages = []
    read = rt.store.inbox_waiting
    monkeypatch.setattr(rt.store, "inbox_waiting", lambda *a, **k: pages.append(k["after"]) or read(*a, **k))
    waiting = [rt.run(plan, {"file_id": "shared"}, initiator="user:a").run.id for _ in range(5)]
    other = compile_bytes(WORKFLOW.replace(b"name: scan-wait", b"name: scan-other")
                          .replace(b"event: scan.finished", b"event: scan.finished_late"), "<other>")
    elsewhere = rt.run(other, {"file_id": "shared"}, initiator="user:a").run.id
    # When the verdict comes
    taken = rt.offer_event("default", "scanner", "v1", "scan.finished", {"file_id": "shared", "clean": True})
    # Then every one of the five took it (read in three pages), and the run waiting for another type did not
    assert sorted(t.run_id for t in taken) == sorted(waiting) and {t.result for t in taken} == {"taken"}
    assert len(pages) == 3
    assert rt.status(elsewhere).state == "waiting"
