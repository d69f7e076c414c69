"""`sealflow verify --bom`: a verified definition's bill of materials, derived from the signed bytes.

Given ops-report (which calls team-notification) and lead-qualification, signed with a key the policy trusts,
when verified with --bom, then the bill lists the files the verification read with their sha256, the workflow it
calls (with that workflow's own bill), the actions with the module and distribution that register them (and
their effect and permissions with --actions), and the models with the provider and model id configured here.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sealflow.cli import main

ROOT = Path(__file__).resolve().parents[2]


def signed(tmp_path: Path, capsys, *names: str) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    assert main(["keygen", "--out", str(folder / "ops")]) == 0
    (folder / "policy.yaml").write_text("keys:\n  - id: ops\n    public_key: ops.pub.pem\n")
    for name in names:
        shutil.copy(ROOT / "definitions" / name, folder / name)
        assert main(["sign", str(folder / name), "--key", str(folder / "ops.pem")]) == 0
    capsys.readouterr()
    return folder


def bom(capsys, folder: Path, name: str, *extra: str) -> dict:
    code = main(["verify", str(folder / name), "--trust", str(folder / "policy.yaml"), "--bom", "--json", *extra])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    return out["results"][0]["bom"]


def test_the_bill_names_the_called_workflow_the_files_read_and_the_actions_with_their_module(tmp_path, capsys):
    folder = signed(tmp_path, capsys, "team-notification.v1.yaml", "ops-report.v1.yaml")
    bill = bom(capsys, folder, "ops-report.v1.yaml", "--actions", "sealflow.demo")
    # Then the definition is named with its digest and signer
    assert bill["definition"]["name"] == "ops-report" and bill["definition"]["signer"].startswith("key:")
    # and the files the verification read are listed with their sha256 (the called file and its signature)
    files = {f["path"]: f["sha256"] for f in bill["files"]}
    child = (folder / "team-notification.v1.yaml").read_bytes()
    assert files["team-notification.v1.yaml"] == hashlib.sha256(child).hexdigest()
    assert "team-notification.v1.yaml.dsse.json" in files
    # and the called workflow, with its own bill: its action, effect, permissions and where it comes from
    [called] = bill["calls"]
    assert called["definition"]["name"] == "team-notification" and called["definition"]["digest"].startswith("sha")
    [send] = called["actions"]
    assert (send["name"], send["effect"], send["permissions"]) == ("notifications.send", "irreversible",
                                                                   ["notify:send"])
    assert send["module"] == "sealflow.demo.media" and send["distribution"].startswith("sealflow ")
    assert {a["name"] for a in bill["actions"]} == {"metrics.query", "incidents.list", "reports.archive"}


def test_the_bill_names_each_model_with_the_provider_configured_here(tmp_path, capsys):
    folder = signed(tmp_path, capsys, "lead-qualification.v1.yaml")
    bill = bom(capsys, folder, "lead-qualification.v1.yaml")
    # Then the model the definition names is shown with the provider and model id behind it here
    assert {"name": "default", "provider": "local", "model": "local"} in bill["models"]


def test_the_text_bill_lists_each_action_with_the_module_that_registers_it(tmp_path, capsys):
    # Given a signed definition verified without its action modules named
    folder = signed(tmp_path, capsys, "team-notification.v1.yaml")
    code = main(["verify", str(folder / "team-notification.v1.yaml"), "--trust", str(folder / "policy.yaml"),
                 "--bom"])
    out = capsys.readouterr().out
    # Then the text bill lists the action with the module that registers it (the demo world, loaded by default)
    assert code == 0 and "bill of materials of team-notification v1" in out
    assert "action  notifications.send" in out and "sealflow.demo.media" in out


def test_the_bill_names_each_mcp_tool_with_the_digests_the_lock_pins(tmp_path, capsys):
    # Given shipment-check (an agent with a locked MCP tool) signed, beside the lock
    folder = tmp_path / "repo"
    folder.mkdir()
    shutil.copy(ROOT / "definitions" / "sealflow.mcp.lock", folder / "sealflow.mcp.lock")
    assert main(["keygen", "--out", str(folder / "ops")]) == 0
    (folder / "policy.yaml").write_text("keys:\n  - id: ops\n    public_key: ops.pub.pem\n")
    shutil.copy(ROOT / "definitions" / "shipment-check.v1.yaml", folder / "shipment-check.v1.yaml")
    assert main(["sign", str(folder / "shipment-check.v1.yaml"), "--key", str(folder / "ops.pem")]) == 0
    capsys.readouterr()
    bill = bom(capsys, folder, "shipment-check.v1.yaml")
    # Then each MCP tool is listed with its effect and the digests pinned for it, and the lock among the files
    lock = json.loads((folder / "sealflow.mcp.lock").read_text())
    assert bill["mcp_tools"] and all(t["description_digest"].startswith("sha256:") for t in bill["mcp_tools"])
    server, tool = bill["mcp_tools"][0]["tool"].split("/")
    assert lock["servers"][server]["tools"][tool]["description_digest"] == bill["mcp_tools"][0]["description_digest"]
    assert "sealflow.mcp.lock" in {f["path"] for f in bill["files"]}
