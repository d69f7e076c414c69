"""A signed caller and the workflow it calls, end to end: signed in CI, verified, run by a trust-gated worker.

Given ops-report (which calls team-notification) and a key the trust policy names, when only the caller is
signed, then `sealflow verify` refuses it (untrusted-child); when both are signed, then it verifies, the
submitted bytes are stored with the child's file and signature, and a worker whose gate holds the same policy
verifies them again from the store and runs the caller and its child to the end.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sealflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = ROOT / "definitions"


def signed_folder(tmp_path: Path, capsys) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    for name in ("ops-report.v1.yaml", "team-notification.v1.yaml"):
        shutil.copy(DEFINITIONS / name, folder / name)
    assert main(["keygen", "--out", str(folder / "ops")]) == 0
    (folder / "policy.yaml").write_text("keys:\n  - id: ops\n    public_key: ops.pub.pem\n")
    capsys.readouterr()
    return folder


def test_a_caller_verifies_only_with_its_child_signed_and_a_gated_worker_runs_both(tmp_path, capsys, monkeypatch):
    folder = signed_folder(tmp_path, capsys)
    monkeypatch.setenv("SEALFLOW_DEMO_DB", str(tmp_path / "demo.db"))
    caller, policy = folder / "ops-report.v1.yaml", folder / "policy.yaml"
    # Given only the caller signed
    assert main(["sign", str(caller), "--key", str(folder / "ops.pem")]) == 0
    # When it is verified, Then it is refused: the workflow it calls is not signed
    assert main(["verify", str(caller), "--trust", str(policy)]) == 1
    said = capsys.readouterr()
    assert "untrusted-child" in said.out + said.err
    # Given the child signed too, When verified, Then it verifies
    assert main(["sign", str(folder / "team-notification.v1.yaml"), "--key", str(folder / "ops.pem")]) == 0
    assert main(["verify", str(caller), "--trust", str(policy)]) == 0
    # When it is loaded as a submitter does, Then the child's file and signature are stored with its bytes
    from sealflow.cli.definition_files import try_load

    loaded = try_load(str(caller), (), trust=str(policy))
    assert sorted(loaded.source.refs or {}) == ["team-notification.v1.yaml", "team-notification.v1.yaml.dsse.json"]
    # When a worker whose gate holds the same policy runs it from the store
    import sealflow.demo  # noqa: F401 - the demo actions, registered as `sealflow run` has them
    from sealflow.dsl.trust import load_policy
    from sealflow.execution.actions import REGISTRY
    from sealflow.policy.trustgate import TrustGate
    from sealflow.runtime.facade import Runtime
    from sealflow.store import open_store

    rt = Runtime(open_store(f"sqlite:///{tmp_path / 'state.db'}"), REGISTRY, {},
                 trust_gate=TrustGate(policy=load_policy(policy)))
    try:
        status = rt.run(loaded.plan, {"owner": "usr_alice"}, initiator="user:ana", signer=loaded.signer,
                        source=loaded.source, until="final")
        # Then the caller and its child completed, each verified by the worker's own policy
        assert status.run.state == "completed", (status.run.error_message, status.waiting)
        [kid] = rt.store.children(status.run.id)
        assert kid.state == "completed" and kid.output == {"notification_id": "ntf_000001"}
        # and the registry records the called workflow with the caller, signed by the same key
        recorded = {(d.name, d.version): d for d in rt.store.definitions()}
        child_plan = loaded.plan.step("notify").call.plan
        assert recorded[("team-notification", 1)].digest == child_plan.digest
        assert recorded[("team-notification", 1)].signer == loaded.signer
        # When another team-notification v1 (changed, signed by the same key) comes with ops-report v2 calling it
        child = folder / "team-notification.v1.yaml"
        child.write_text(child.read_text().replace("budget: {max_steps: 5", "budget: {max_steps: 6"))
        assert main(["sign", str(child), "--key", str(folder / "ops.pem")]) == 0
        v2 = folder / "ops-report.v2.yaml"
        v2.write_text(caller.read_text().replace("\nversion: 1\n", "\nversion: 2\n", 1))
        assert main(["sign", str(v2), "--key", str(folder / "ops.pem")]) == 0
        again = try_load(str(v2), (), trust=str(policy))
        # Then its submit is refused: a signed (name, version) never changes, a called one neither
        from sealflow.store.definitions import DefinitionRefused

        with pytest.raises(DefinitionRefused, match="team-notification v1 is already recorded"):
            rt.submit(again.plan, {"owner": "usr_bob"}, initiator="user:ana", signer=again.signer,
                      source=again.source)
        assert len(rt.store.list_runs()) == 2  # (the caller and its child: nothing new)
    finally:
        rt.close()
        rt.store.close()
