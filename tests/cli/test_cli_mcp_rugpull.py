"""The issue's story end to end through the command line (issue 36): a project pins its MCP server's tools, a
definition's agent uses one with the local model, it runs; then the server changes the tool (a rug pull): the run
is refused naming the tool and what changed, `mcp lock --check` fails, and once re-locked `sealflow diff` asks
for a security reviewer."""

from __future__ import annotations

import json
import subprocess

from sealflow.cli import main
from sealflow.dsl.diff_mcp import CODE
from tests.mcp_helpers import stdio_spec, write_project

DEFINITION = """\
sealflow: 1
name: lookup-order
version: 1
owner: team:support
input:
  schema: {type: object, required: [order_id], properties: {order_id: {type: string}}}
permissions: [orders:read]
steps:
  - id: look
    agent:
      model: default
      goal: "What is the status of order ${{ input.order_id }}?"
      mcp_tools:
        - {tool: own/lookup, effect: read, permissions: [orders:read]}
      max_steps: 3
      max_tool_calls: 2
      output_schema: {type: object, required: [summary], properties: {summary: {type: string}}}
    permissions: [orders:read]
"""


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_pinned_tool_runs_then_a_changed_one_is_refused_and_the_relock_needs_review(tmp_path, capsys, monkeypatch):
    for name in ("SEALFLOW_PROJECT", "SEALFLOW_STORE", "SEALFLOW_TRUST", "SEALFLOW_CONFIG", "SEALFLOW_ACCESS"):
        monkeypatch.delenv(name, raising=False)
    # Given a project pinning the tests' own server, and a definition whose agent uses its lookup tool
    write_project(tmp_path, {"own": stdio_spec("base")})
    (tmp_path / "definitions").mkdir()
    (tmp_path / "definitions" / "lookup-order.v1.yaml").write_text(DEFINITION)
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "mcp", "lock")[0] == 0
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "add", "-A"], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "pin"],
                   check=True)
    run = ("run", "definitions/lookup-order.v1.yaml", "--input", '{"order_id": "ord_1234"}', "--json")
    # When it runs with the local model, then the agent called the pinned tool and the run completed
    code, out, err = cli(capsys, *run)
    assert code == 0, (out, err)
    assert json.loads(out)["usage"]["tool_calls"] == 1
    # When the server now lists another schema for lookup (a rug pull) and the workflow runs again
    write_project(tmp_path, {"own": stdio_spec("schema")})
    code, out, err = cli(capsys, *run)
    # Then the run fails policy_denied, naming the server, the tool and what changed; the model saw no tool
    result = json.loads(out)
    assert code == 1 and result["error"]["class"] == "policy_denied"
    assert "own/lookup" in result["error"]["message"] and "input schema" in result["error"]["message"]
    assert result["usage"]["tool_calls"] == 0
    # And the lock check fails in CI
    assert cli(capsys, "mcp", "lock", "--check")[0] == 1
    # When someone re-locks, then the diff against the reviewed commit needs a security reviewer (exit 2)
    assert cli(capsys, "mcp", "lock")[0] == 0
    code, out, err = cli(capsys, "diff", "--base", "HEAD", "definitions", "--format", "json")
    assert code == 2 and any(f["code"] == CODE for f in json.loads(out)["findings"])
