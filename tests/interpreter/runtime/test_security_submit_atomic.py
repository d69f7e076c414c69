"""Issue 9, defect 3: nothing is written by a refused submission, whatever refuses it.

A submission of a signed definition records the definition, its signed bytes and any pin in the same
transaction as its run, after authorisation: a refusal -- unauthorised, invalid input, a second digest,
a rollback without a pin, the tenant's limits, an idempotency conflict -- leaves no run, no pin, no
definition row, no stored source and no quota use; only its audit event.
"""

from __future__ import annotations

import pytest
from interp_helpers import S, make_plan
from security_helpers import events

from sealflow.core.errors import StepError
from sealflow.policy.authz import Unauthorized
from sealflow.runtime.config import RuntimeConfig, TenantLimits
from sealflow.store import AdmissionRefused, IdempotencyConflict
from sealflow.store.definitions import DefinitionRefused, DefinitionSource

SIGNER = "key:" + "ab" * 32
SCHEMA = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}


def plan(version: int, *, marker: str = "a", perms=("crm:read",), **kw):
    return make_plan(S("x", "succeed"), name="wf", version=version, permissions=perms, input_schema=SCHEMA,
                     output={"marker": marker}, **kw)


def source(marker: str = "a") -> DefinitionSource:
    return DefinitionSource(f"bytes {marker}".encode(), b'{"payloadType": "x"}', "dsse")


def submit(rt, p, *, who="user:alice", value=None, **kw):
    return rt.submit(p, {"n": 1} if value is None else value, initiator=who, tenant="acme", signer=SIGNER,
                     source=source(p.output["marker"]), **kw)


def written(rt) -> dict:
    tables = ("runs", "attempts", "outbox", "definitions", "definition_pins", "definition_sources", "tenant_usage",
              "plans")
    conn = rt.store._conn
    return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}


@pytest.fixture
def recorded(rt, policy):
    """v1 and v2 of wf recorded by alice (v2 active); acme may queue three runs; olga may pin."""
    policy.tenants["acme"]["roles"]["operator"] = ["crm:read", "definitions:pin"]
    policy.grant("user:olga", "operator")
    rt.config = RuntimeConfig(tenant_limits={"acme": TenantLimits(max_queued_runs=3)})
    submit(rt, plan(1))
    submit(rt, plan(2), idempotency_key="k2")
    return rt


REFUSALS = {
    # (what is submitted, the error): each one, accepted, would write a run, a definition row and a pin
    "not a member": (lambda rt: submit(rt, plan(9), who="user:mallory", pin=True), Unauthorized),
    "missing permission": (lambda rt: submit(rt, plan(9, perms=("billing:charge",)), who="user:bob", pin=True),
                           Unauthorized),
    "a pin without definitions:pin": (lambda rt: submit(rt, plan(1), pin=True), Unauthorized),
    "run_as not the schedule's": (lambda rt: submit(rt, plan(9), run_as="service:nightly", pin=True), Unauthorized),
    "invalid input": (lambda rt: submit(rt, plan(9), value={"n": "x"}, pin=True), StepError),
    "second digest": (lambda rt: submit(rt, plan(2, marker="b"), pin=True, who="user:olga"), DefinitionRefused),
    "rollback without a pin": (lambda rt: submit(rt, plan(1)), DefinitionRefused),
    "over the queued-run limit": (lambda rt: submit(rt, plan(9), pin=True, who="user:olga"), AdmissionRefused),
    "idempotency conflict": (lambda rt: submit(rt, plan(9), value={"n": 2}, idempotency_key="k2", pin=True,
                                               who="user:olga"), IdempotencyConflict),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refused_submission_writes_no_run_no_pin_no_definition_and_uses_no_quota(recorded, case):
    # Given a store with v1 and v2 recorded
    do, error = REFUSALS[case]
    if case == "over the queued-run limit":  # a third queued run fills the tenant's limit first
        submit(recorded, plan(3))
    before = written(recorded)
    # When a submission is refused
    with pytest.raises(error):
        do(recorded)
    # Then nothing was written: no run, no pin, no definition row, no source, no quota use
    assert written(recorded) == before


def test_a_refused_pin_leaves_no_pin_for_the_next_legitimate_run(recorded):
    # Given an outsider's refused `submit --pin-version` of the old v1
    with pytest.raises(Unauthorized):
        submit(recorded, plan(1), who="user:mallory", pin=True)
    # Then there is no pin, and a legitimate v1 submission without a pin is still a refused rollback
    assert recorded.store.definitions("wf")[1].active
    with pytest.raises(DefinitionRefused) as refused:
        submit(recorded, plan(1))
    assert refused.value.reason == "rollback"
    # And both refusals are audited, the second with the registry's reason
    assert events(recorded, "submit_denied", run_id=None)
    assert [e.detail["reason"] for e in events(recorded, "definition.refused", run_id=None)] == ["rollback"]


def test_an_authorised_pin_is_recorded_with_its_run_in_one_go(recorded):
    run_id = submit(recorded, plan(1), pin=True, who="user:olga")
    records = {d.version: d for d in recorded.store.definitions("wf")}
    assert records[1].pinned and records[1].active and recorded.store.get_run(run_id).workflow_version == 1
    [src] = recorded.store.definition_sources(records[1].digest)
    assert src.source == b"bytes a" and src.kind == "dsse"
