"""The language's full example (DSL.md), compiled from YAML and run with the demo actions and local model."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def lead_plan():
    api = pytest.importorskip("sealflow.dsl.api")
    pytest.importorskip("sealflow.demo.actions")
    return api.compile_file(ROOT / "definitions" / "lead-qualification.v1.yaml")


@pytest.fixture
def demo_runtime(tmp_path):
    from sealflow.demo import store as demo_store
    from sealflow.execution.actions import REGISTRY
    from sealflow.runtime.facade import Runtime

    demo_store.configure(tmp_path / "demo.db")
    rt = Runtime(f"sqlite:///{tmp_path}/state.db", REGISTRY)
    yield rt
    rt.close()
    demo_store.configure(None)


def test_a_high_value_lead_waits_for_approval_then_follows_up_once(demo_runtime, lead_plan):
    status = demo_runtime.run(lead_plan, {"lead_id": "lead_acme"}, initiator="user:ana")
    assert status.state == "waiting" and status.waiting["step"] == "record@gate"
    demo_runtime.approve(status.run.id, actor="user:ben")
    status = demo_runtime.drive(status.run.id)
    assert status.state == "completed"
    assert [a.step_id for a in status.attempts] == ["fetch_lead", "classify", "route", "record", "record@gate",
                                                     "follow_up", "done"]
    assert status.run.tokens > 0


def test_a_low_value_lead_is_done_without_contact(demo_runtime, lead_plan):
    status = demo_runtime.run(lead_plan, {"lead_id": "lead_tinycafe"}, initiator="user:ana")
    assert status.state == "completed" and "follow_up" not in status.step_states()
