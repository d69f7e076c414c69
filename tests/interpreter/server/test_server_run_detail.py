"""What a reader of a run sees of its steps, the same in ``GET /v1/runs/{id}`` and ``sealflow status --json``:
each step's output (redacted, bounded), its attempts (durations, worker) and its model calls (prompt file and
version, the model that answered, tokens, cost, repair); never to a principal who may not read the run, nor in
what answers another operation."""

from __future__ import annotations

import json
import random

import pytest
from fastapi.testclient import TestClient
from interp_helpers import FakeProvider, S, make_plan
from security_helpers import PolicyFile
from test_server_api import problem_of

from sealflow.cli import main as cli_main
from sealflow.dsl.plan import AiPlan
from sealflow.execution.actions import action
from sealflow.policy.access import FileAccess
from sealflow.runtime.facade import Runtime
from sealflow.runtime.stepview import MAX_VALUE_CHARS
from sealflow.server.app import create_app
from sealflow.server.settings import ServerSettings
from sealflow.store import open_store

PROMPT = {"id": "prompts/classify.md", "version": "3"}


@pytest.fixture
def world(tmp_path, registry, clock):
    """A store under the acme policy, a model ``fake`` answering ``{"label": "hot"}``, and an action that
    returns a long text: (runtime, store URL, policy path)."""
    policy = PolicyFile(tmp_path / "access.yaml")

    @action("t.long", registry=registry)
    def long(ctx, label):
        return {"label": label, "text": "x" * (MAX_VALUE_CHARS + 10)}

    url = f"sqlite:///{tmp_path}/detail.db"
    rt = Runtime(open_store(url, clock=clock), registry, {"fake": FakeProvider({"label": "hot"}, tokens=40)},
                 rng=random.Random(7), worker_timeout_ms=20, access=FileAccess(policy.path))
    yield rt, url, policy.path
    rt.close()
    rt.store.close()


@pytest.fixture
def done_run(world):
    rt = world[0]
    plan = make_plan(S("classify", "ai", ai=AiPlan(model="fake", prompt_template="Classify", prompt_ref=PROMPT)),
                     S("write", "action", action="t.long", args={"label": "${{ steps.classify.output.label }}"}),
                     name="classify-flow")
    run_id = rt.submit(plan, {"lead": 1}, initiator="user:alice", tenant="acme")
    assert rt.drive(run_id).state == "completed"
    return run_id


def _check(body: dict) -> None:
    steps = {s["id"]: s for s in body["steps"]}
    classify, write = steps["classify"], steps["write"]
    assert classify["output"] == {"label": "hot"}
    (call,) = classify["model_calls"]
    assert call["prompt"] == PROMPT and call["model"] == "fake" and call["answered_by"] == "fake"
    assert call["tokens"] == 40 and call["cost_usd"] == pytest.approx(0.001) and call["repair"] is False
    assert "output" not in write and write["output_truncated"]["chars"] > MAX_VALUE_CHARS
    assert len(write["output_truncated"]["preview"]) == MAX_VALUE_CHARS
    for step in (classify, write):
        (attempt,) = step["history"]
        assert attempt["state"] == "succeeded" and attempt["duration_s"] >= 0 and attempt["worker"]
        assert step["duration_s"] == attempt["duration_s"] and step["worker"] == attempt["worker"]


def test_a_reader_sees_outputs_and_model_calls_in_the_api(world, done_run):
    # Given a completed run of alice's with a model step and a step whose output is long
    rt = world[0]
    from sealflow.server import tokens

    with TestClient(create_app(ServerSettings(rate=0), rt), raise_server_exceptions=False) as client:
        def as_(principal):
            text, _ = tokens.create(rt.store, principal, "acme", rt.clock.now(), actor="user:root")
            return {"Authorization": f"Bearer {text}"}

        # When its initiator and an auditor read it, and a manager (who may not read it) tries
        mine, audited = (client.get(f"/v1/runs/{done_run}", headers=as_(p)) for p in ("user:alice", "user:ida"))
        other = client.get(f"/v1/runs/{done_run}", headers=as_("user:bob"))
    # Then both readers see each step's output (the long one cut), attempts and model calls; the other a 404
    assert mine.status_code == audited.status_code == 200
    _check(mine.json())
    assert mine.json()["steps"] == audited.json()["steps"]
    problem_of(other, "not-found", 404)


def test_status_json_shows_the_same_steps(world, done_run, capsys):
    # Given the same completed run
    rt, url, access = world
    # When its initiator asks `sealflow status --json`
    code = cli_main(["status", done_run, "--json", "--store", url, "--as", "user:alice", "--tenant", "acme",
                     "--access", str(access)])
    # Then it prints the steps the API shows
    out = capsys.readouterr().out
    assert code == 0, out
    _check(json.loads(out))


def test_what_answers_another_operation_carries_no_step_detail(world, registry):
    # Given a run waiting in a retry, cancelled by an operator
    rt = world[0]
    from sealflow.runtime.status import status_json

    plan = make_plan(S("classify", "ai", ai=AiPlan(model="fake", prompt_template="Classify")),
                     S("wait", "wait", wait={"for_ms": 3_600_000}))
    run_id = rt.submit(plan, {}, initiator="user:alice", tenant="acme")
    rt.drive(run_id)
    # When the cancel's answer is made into JSON as the API does
    answer = status_json(rt.cancel(run_id, actor="user:ops", tenant="acme"))
    # Then no step carries an output, attempts or model calls
    assert all(not {"output", "history", "model_calls"} & set(s) for s in answer["steps"])
