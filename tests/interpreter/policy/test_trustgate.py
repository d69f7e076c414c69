"""The trust gate of an executing process: it verifies the stored signed bytes with its *own* policy.

Issue 9, defect 1: a worker trusted the signer's *name* the submitter recorded, taken from the
submitter's policy. These tests are at the Engine level (a runtime whose engine has the worker's gate);
tests/e2e/test_trust_worker.py runs the same attack against a real worker process.
"""

from __future__ import annotations

import random
import types
from pathlib import Path

import pytest

from sealflow.dsl.trust import load_policy, signing, verify_bytes
from sealflow.execution.actions import action
from sealflow.policy.trustgate import TrustGate, check
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store
from sealflow.store.definitions import DefinitionSource

SOURCE = """sealflow: 1
name: payout
version: {version}
owner: team:finance
steps:
  - id: pay
    action: t.pay
    with: {{to: "{to}"}}
"""


class Signer:
    """A key pair and a trust policy naming its public key ``ops``."""

    def __init__(self, folder: Path, name: str):
        folder.mkdir()
        self.key = signing.generate_key()
        (folder / "k.pub.pem").write_bytes(signing.public_pem(self.key.public_key()))
        (folder / "policy.yaml").write_text("keys:\n  - id: ops\n    public_key: k.pub.pem\n")
        self.policy = load_policy(folder / "policy.yaml")
        self.fingerprint = signing.key_id(self.key.public_key())

    def sign(self, data: bytes) -> bytes:
        return signing.to_json(signing.sign(data, self.key, keyid="ops"))


@pytest.fixture
def world(tmp_path, registry, clock):
    paid: list[str] = []

    @action("t.pay", registry=registry, effect="irreversible")
    def pay(ctx, to=""):
        paid.append(to)
        return {"paid": to}

    genuine, mallory = Signer(tmp_path / "genuine", "ops"), Signer(tmp_path / "mallory", "mallory")
    # the worker: started with the genuine policy
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/gate.db", clock=clock), registry, {}, rng=random.Random(7),
                 worker_timeout_ms=20, trust_gate=lambda actor: TrustGate(policy=genuine.policy, actor=actor))
    yield types.SimpleNamespace(rt=rt, paid=paid, genuine=genuine, mallory=mallory, registry=registry)
    rt.close()
    rt.store.close()


def submit(rt, signer: Signer, *, version: int, to: str, policy=None, claim: str | None = None, **kw):
    """What `sealflow submit --trust POLICY` does: verify with the *submitter's* policy, then submit."""
    data = SOURCE.format(version=version, to=to).encode()
    envelope = signer.sign(data)
    v = verify_bytes(data, f"payout.v{version}.yaml", envelope, policy or signer.policy)
    return rt.submit(v.plan, {}, initiator="user:ana", signer=claim or v.principal(),
                     source=DefinitionSource(data, envelope, "dsse"), **kw)


def test_given_a_genuine_signed_run_when_the_worker_executes_it_then_it_verifies_and_records_the_key(world):
    # Given a definition signed with the genuine key, submitted with the genuine policy
    run_id = submit(world.rt, world.genuine, version=1, to="acme")
    # When the worker (genuine policy) drives it
    status = world.rt.drive(run_id)
    # Then it completes, and the recorded signer is the key's fingerprint, not the policy's label
    assert status.state == "completed" and world.paid == ["acme"]
    assert world.rt.store.get_run(run_id).signer == f"key:{world.genuine.fingerprint}"
    digest = world.rt.store.get_run(run_id).plan_digest
    assert world.rt.engine.trust_gate.verified_signer(digest) == f"key:{world.genuine.fingerprint}"


def test_given_an_attacker_key_named_ops_in_their_own_policy_when_the_worker_runs_it_then_refused(world):
    # Given the genuine v1 ran, so v1 is active
    assert world.rt.drive(submit(world.rt, world.genuine, version=1, to="acme")).state == "completed"
    # And an attacker signs v2 with their own key, under the id "ops" in their own policy
    run_id = submit(world.rt, world.mallory, version=2, to="mallory")
    # When the worker (started with the genuine policy) drives it
    status = world.rt.drive(run_id)
    # Then the first step is refused as unauthorized before it runs: nothing is paid to the attacker
    assert status.state == "failed" and world.paid == ["acme"]
    run = world.rt.store.get_run(run_id)
    # (the envelope names key id "ops", which the worker's policy maps to the genuine key: it does not verify)
    assert run.error_class == "unauthorized" and "[tampered] the signature by key ops does not verify" in \
        run.error_message
    # And the run is on the dead-letter list with the reason, and the refusal is audited naming the signer
    dead = world.rt.store.dead_letter(run_id)
    assert dead is not None and "trust policy refuses" in dead.reason
    [refused] = [e for e in world.rt.store.audit(run_id) if e.event == "trust_refused"]
    assert refused.detail["signer"] == f"key:{world.mallory.fingerprint}"
    assert "does not verify" in refused.detail["reason"]
    # And the forged version never becomes active: v1 still is, and is no rollback
    records = {d.version: d for d in world.rt.store.definitions("payout")}
    assert records[1].active and not records[2].active and records[2].refused
    again = submit(world.rt, world.genuine, version=1, to="acme")
    assert world.rt.drive(again).state == "completed" and world.paid == ["acme", "acme"]


def test_given_a_submitter_that_claims_the_genuine_fingerprint_when_executed_then_the_claim_is_not_trusted(world):
    # Given an attacker who records the genuine key's fingerprint as the signer of their own envelope
    claim = f"key:{world.genuine.fingerprint}"
    run_id = submit(world.rt, world.mallory, version=1, to="mallory", claim=claim)
    # When the worker drives it, then the claim changes nothing: the stored envelope does not verify
    assert world.rt.drive(run_id).state == "failed" and world.paid == []


def test_given_genuine_signed_bytes_stored_for_another_plan_when_executed_then_refused(world):
    # Given an attacker who pairs the genuine signed bytes with a plan compiled from other bytes
    data = SOURCE.format(version=1, to="acme").encode()
    envelope = world.genuine.sign(data)
    evil = SOURCE.format(version=1, to="mallory").encode()
    plan = verify_bytes(evil, "payout.v1.yaml", world.mallory.sign(evil), world.mallory.policy).plan
    run_id = world.rt.submit(plan, {}, initiator="user:ana", signer=f"key:{world.genuine.fingerprint}",
                             source=DefinitionSource(data, envelope, "dsse"))
    # When the worker drives it, then it is refused: the signed bytes do not compile to the run's plan
    assert world.rt.drive(run_id).state == "failed" and world.paid == []
    assert "not to the plan the run executes" in world.rt.store.get_run(run_id).error_message


def test_given_a_forged_version_refused_when_the_genuine_same_version_arrives_then_it_replaces_it(world):
    # Given the attacker got v1 recorded first, and a worker refused it
    assert world.rt.drive(submit(world.rt, world.mallory, version=1, to="mallory")).state == "failed"
    # When the genuine v1 (another digest) is submitted, then it is no "second digest": it replaces the refused one
    run_id = submit(world.rt, world.genuine, version=1, to="acme")
    assert world.rt.drive(run_id).state == "completed" and world.paid == ["acme"]
    [record] = world.rt.store.definitions("payout")
    assert record.active and record.refused is None and record.signer == f"key:{world.genuine.fingerprint}"


def test_given_a_worker_without_a_policy_when_a_signed_run_arrives_then_it_leaves_it_for_one_with_a_policy(world):
    # Given a worker with no trust policy (on the same store), When a signed run arrives
    bare = Runtime(world.rt.store, world.registry, {}, clock=world.rt.clock, rng=random.Random(7),
                   worker_timeout_ms=20, trust_gate=TrustGate())
    try:
        run_id = submit(bare, world.genuine, version=1, to="acme")
        status = bare.drive(run_id)
    finally:
        bare.close()
    # Then it cannot verify it, so it leaves the step as it was (engine/capability.py): nothing paid, not failed
    assert status.state == "queued" and world.paid == [] and status.error == (None, None)
    [(kind, reason)] = status.waiting["lacks"]
    assert kind == "trust" and "no trust policy to verify" in reason
    # And a worker with the policy verifies and executes it
    world.rt.clock.advance(world.rt.redeliver_after + 1)
    assert world.rt.drive(run_id).state == "completed" and world.paid == ["acme"]


def test_given_a_run_recorded_without_its_source_when_executed_then_refused_with_what_to_do(world):
    data = SOURCE.format(version=1, to="acme").encode()
    v = verify_bytes(data, "payout.v1.yaml", world.genuine.sign(data), world.genuine.policy)
    run_id = world.rt.submit(v.plan, {}, initiator="user:ana", signer=v.principal())  # as before migration 6
    assert world.rt.drive(run_id).state == "failed"
    assert "no signed bytes" in world.rt.store.get_run(run_id).error_message


# -- the gate alone ---------------------------------------------------------------------------------

def run(signer):
    return types.SimpleNamespace(id="run_1", workflow="wf", workflow_version=3, signer=signer, plan_digest="sha256:x")


def test_given_no_gate_when_checked_then_everything_runs():
    assert check(None, types.SimpleNamespace(run=run("unsigned"))) is None


def test_given_the_default_gate_when_a_run_is_unsigned_then_it_is_refused_as_unauthorized():
    gate = TrustGate()
    failed = check(gate, types.SimpleNamespace(run=run("unsigned")))
    assert failed.error_class == "unauthorized" and "--allow-unsigned" in failed.message
    assert check(gate, types.SimpleNamespace(run=run(None))).error_class == "unauthorized"


def test_given_allow_unsigned_when_a_run_is_unsigned_then_it_runs():
    assert TrustGate(allow_unsigned=True).refusal(run("unsigned")) is None


def test_given_an_attacker_key_when_run_in_the_callers_thread_then_refused_before_it_runs(world):
    # Given a definition signed by an attacker's key named "ops" in their own policy
    data = SOURCE.format(version=1, to="mallory").encode()
    envelope = world.mallory.sign(data)
    v = verify_bytes(data, "payout.v1.yaml", envelope, world.mallory.policy)
    # When it is run with Runtime.run (its first step claimed in the submit, run in the caller's thread)
    status = world.rt.run(v.plan, {}, initiator="user:ana", signer=v.principal(),
                          source=DefinitionSource(data, envelope, "dsse"))
    # Then the process's own policy refuses it before the step runs: nothing is paid
    assert status.state == "failed" and status.run.error_class == "unauthorized" and world.paid == []
    assert [e for e in world.rt.store.audit(status.run.id) if e.event == "trust_refused"]
