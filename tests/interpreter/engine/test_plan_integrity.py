"""A stored plan that is not what its digest says (a tampered or corrupted row of the store's ``plans`` table) is
refused once: the run fails with the reason, lands in the dead-letter list and ``trust_refused`` is audited; the
step is never run from it and never retried. On every store backend."""

from __future__ import annotations

import json
import sqlite3

import pytest
from interp_helpers import BACKENDS, S, make_plan, retry

from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.store.errors import PlanTampered


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    """``(store url, tamper(digest, body))``: a fresh store of each backend and a way to rewrite its plans row."""
    if request.param == "sqlite":
        path = tmp_path / "plans.db"

        def tamper(digest: str, body: str) -> None:
            with sqlite3.connect(path) as conn:
                conn.execute("UPDATE plans SET body = ? WHERE digest = ?", (body, digest))

        return f"sqlite:///{path}", tamper
    schema = request.getfixturevalue("pg_schema")

    def tamper_pg(digest: str, body: str) -> None:
        with schema.connect() as conn:
            conn.execute("UPDATE plans SET body = %s WHERE digest = %s", (body, digest))

    return schema.url(migrate="1"), tamper_pg


class World:
    def __init__(self):
        self.registry = Registry()
        self.calls: list[str] = []

        @action("t.work", registry=self.registry)
        def work(ctx):
            self.calls.append("work")
            return {"ok": True}

        @action("t.evil", registry=self.registry)
        def evil(ctx):
            self.calls.append("evil")
            return {"pwned": True}


def _edited(plan, body: str) -> str:
    """The row's body with its action swapped and its recorded digest kept: it no longer hashes to it."""
    return body.replace('"t.work"', '"t.evil"')


def _swapped(plan, body: str) -> str:
    """Another plan, whole and self-consistent (its own digest inside), stored under this plan's digest."""
    return make_plan(S("a", "action", action="t.evil"), name=plan.name).to_json(indent=None)


def _garbled(plan, body: str) -> str:
    """A row that is not a plan at all (a torn write, a disk error)."""
    return body[: len(body) // 2]


@pytest.mark.parametrize("rewrite", [_edited, _swapped, _garbled], ids=["edited", "swapped", "garbled"])
def test_given_a_stored_plan_that_no_longer_matches_its_digest_when_a_worker_takes_the_run_then_it_is_refused_once(
        backend, rewrite):
    url, tamper = backend
    world = World()
    # Given a run submitted (not started) whose step would be retried on a lost worker
    plan = make_plan(S("a", "action", action="t.work", retry=retry("worker_lost", max_attempts=3)))
    first = Runtime(url, world.registry)
    run_id = first.submit(plan, {}, initiator="user:ana")
    body = first.store.get_plan(plan.digest)
    first.close()
    first.store.close()
    # And its plans row rewritten in the store
    tampered = rewrite(plan, body)
    assert tampered != body
    tamper(plan.digest, tampered)
    # When another process (a fresh runtime: nothing cached) drives the run
    rt = Runtime(url, world.registry)
    try:
        status = rt.drive(run_id, timeout=20)
        again = rt.drive(run_id, timeout=5)  # and once more: nothing is left to do
        letters = rt.dlq_list()
        audit = rt.audit(run_id)
    finally:
        rt.close()
        rt.store.close()
    # Then nothing of it ran, and the run failed once, with the reason
    assert world.calls == []
    assert status.state == again.state == "failed"
    assert status.error[0] == "unauthorized" and "does not match its digest" in status.error[1]
    assert [(a.step_id, a.attempt, a.state, a.error_class) for a in again.attempts] == [
        ("a", 1, "failed", "unauthorized")]
    # And it is in the dead-letter list, and the refusal is audited once, naming the plan
    [letter] = letters
    assert letter.run_id == run_id and letter.error_class == "unauthorized" and "[tampered]" in letter.reason
    [refused] = [e for e in audit if e.event == "trust_refused"]
    assert refused.detail["plan"] == plan.digest and "[tampered]" in refused.detail["reason"]


def test_given_a_plan_row_that_does_not_hash_to_its_digest_when_loaded_then_plan_tampered_says_which_and_why(
        tmp_path):
    # Given a store holding a plan whose row was edited (its recorded digest kept)
    world = World()
    plan = make_plan(S("a", "action", action="t.work"))
    rt = Runtime(f"sqlite:///{tmp_path / 'p.db'}", world.registry)
    try:
        rt.submit(plan, {}, initiator="user:ana")
        with sqlite3.connect(tmp_path / "p.db") as conn:
            body = json.loads(conn.execute("SELECT body FROM plans").fetchone()[0])
            body["steps"][0]["action"] = "t.evil"
            conn.execute("UPDATE plans SET body = ?", (json.dumps(body),))
        # When a process that has not cached it loads it
        fresh = Runtime(rt.store, world.registry)
        with pytest.raises(PlanTampered) as raised:
            fresh.engine.plan(plan.digest)
    finally:
        rt.close()
        rt.store.close()
    # Then the error names the digest and says it does not match, never a bare ValueError
    assert raised.value.digest == plan.digest
    assert "does not match its digest" in str(raised.value)


def test_given_a_run_refused_for_its_tampered_plan_when_an_operator_redrives_it_then_refused_without_a_bug_report(
        tmp_path, capsys, monkeypatch):
    from sealflow.cli import main
    from sealflow.execution.actions import REGISTRY

    # Given a run refused for its tampered plan, in the command line's store
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("SEALFLOW_STORE", url)
    plan = make_plan(S("a", "set", assign={"x": "1"}))
    first = Runtime(url, REGISTRY)
    run_id = first.submit(plan, {}, initiator="user:ana")
    first.close()
    first.store.close()
    with sqlite3.connect(tmp_path / "cli.db") as conn:
        conn.execute("UPDATE plans SET body = replace(body, '\"1\"', '\"2\"')")
    rt = Runtime(url, REGISTRY)
    assert rt.drive(run_id, timeout=20).state == "failed"
    rt.close()
    rt.store.close()
    capsys.readouterr()
    # When an operator redrives it
    code = main(["dlq", "redrive", run_id])
    err = capsys.readouterr().err
    # Then it is refused with what is wrong and what to do, not an internal error
    assert code == 1 and f"refused: cannot redrive run {run_id} (test-flow v1): the stored plan" in err, err
    assert "does not match its digest" in err and "nothing was changed" in err
    assert "hint: restore that row" in err and "internal error" not in err
