"""The worker's trust gate: which recorded signers' runs a long-lived worker executes."""

from __future__ import annotations

import types

from sealflow.interpreter.policy.trustgate import TrustGate, check


def run(signer):
    return types.SimpleNamespace(id="run_1", workflow="wf", workflow_version=3, signer=signer)


def test_given_no_gate_when_checked_then_everything_runs():
    assert check(None, types.SimpleNamespace(run=run("unsigned"))) is None


def test_given_the_default_gate_when_a_run_is_unsigned_then_it_is_refused_as_unauthorized():
    gate = TrustGate()
    failed = check(gate, types.SimpleNamespace(run=run("unsigned")))
    assert failed.error_class == "unauthorized" and "--allow-unsigned" in failed.message
    assert check(gate, types.SimpleNamespace(run=run(None))).error_class == "unauthorized"


def test_given_allow_unsigned_when_a_run_is_unsigned_then_it_runs():
    assert TrustGate(allow_unsigned=True).refusal(run("unsigned")) is None


def test_given_a_policy_when_the_recorded_signer_is_not_named_then_refused():
    gate = TrustGate(signers=frozenset({"ops", "sigstore"}))
    assert gate.refusal(run("ops")) is None
    assert gate.refusal(run("sigstore:ci@example (issuer https://token.actions.githubusercontent.com)")) is None
    assert "does not name" in gate.refusal(run("mallory"))
