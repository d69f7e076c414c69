"""A signed definition whose agent uses a pinned MCP tool (issue 36): the lock is stored with the signed bytes, so
a process that verifies the stored bytes again (the executor's trust gate) compiles the same plan, and runs it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sealflow.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_a_signed_mcp_definition_runs_under_a_trust_policy(tmp_path, capsys, monkeypatch):
    # Given shipment-check and its lock in a project folder, signed with a key the trust policy names
    for name in ("SEALFLOW_PROJECT", "SEALFLOW_STORE", "SEALFLOW_TRUST", "SEALFLOW_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    defs = tmp_path / "definitions"
    defs.mkdir()
    shutil.copy(ROOT / "definitions" / "shipment-check.v1.yaml", defs)
    shutil.copy(ROOT / "definitions" / "sealflow.mcp.lock", tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["keygen", "--out", "ops"]) == 0
    assert main(["sign", "definitions/shipment-check.v1.yaml", "--key", "ops.pem", "--key-id", "ops"]) == 0
    (tmp_path / "trust.yaml").write_text("keys:\n  - id: ops\n    public_key: ops.pub.pem\n"
                                         "namespaces: {customer-support: [ops]}\n")
    capsys.readouterr()
    # When it is run with the trust policy (the executor verifies the stored signed bytes again)
    code = main(["run", "definitions/shipment-check.v1.yaml", "--trust", "trust.yaml", "--store",
                 f"sqlite:///{tmp_path}/state.db", "--input", '{"order_id": "ord_5600"}', "--json"])
    out, err = capsys.readouterr()
    # Then it ran to its end through the carrier's MCP tool, recorded as signed by the key
    result = json.loads(out)
    assert code == 0 and result["state"] == "completed", (out, err)
    assert result["signer"] != "unsigned" and result["output"]["needs_human"] is False


def test_a_lock_changed_after_signing_changes_the_plan(tmp_path, capsys, monkeypatch):
    # Given the same signed definition, verified against its lock, then against a lock whose tool changed
    from sealflow.dsl import mcp_lock
    from sealflow.dsl.api import check_file

    defs = tmp_path / "definitions"
    defs.mkdir()
    shutil.copy(ROOT / "definitions" / "shipment-check.v1.yaml", defs)
    shutil.copy(ROOT / "definitions" / "sealflow.mcp.lock", tmp_path)
    before = check_file(defs / "shipment-check.v1.yaml").plan
    lock = mcp_lock.read(tmp_path / "sealflow.mcp.lock")
    tool = lock["carrier/track_shipment"]
    lock["carrier/track_shipment"] = mcp_lock.LockedTool(tool.server, tool.name, tool.description + " Also mail.",
                                                         tool.input_schema, tool.output_schema)
    (tmp_path / "sealflow.mcp.lock").write_text(mcp_lock.render(lock))
    after = check_file(defs / "shipment-check.v1.yaml").plan
    # Then the plan digest differs: a run records which pinned tools it was started with
    assert before.digest != after.digest
