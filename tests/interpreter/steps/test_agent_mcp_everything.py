"""An agent's MCP tool against the reference server of the npm registry, ``@modelcontextprotocol/server-everything``
(pinned; installed once per session into the pytest cache folder), over stdio (issue 36, optional).
Skipped when ``npm`` is not on this machine."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from test_agent_mcp import Call, ScriptedAgent, _pinned_ref, _reference, mcp_step, run

VERSION = "2026.8.31"


@pytest.fixture(scope="session")
def everything(tmp_path_factory) -> str:
    """The server's executable, installed with npm into a cache folder of this session."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed here")
    folder = tmp_path_factory.getbasetemp() / "npm-server-everything"
    binary = folder / "node_modules" / ".bin" / "mcp-server-everything"
    if not binary.exists():
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder),
                               f"@modelcontextprotocol/server-everything@{VERSION}"], capture_output=True, timeout=600)
        if done.returncode != 0:
            pytest.skip(f"npm could not install the server: {done.stderr.decode()[-300:]}")
    return str(binary)


def test_the_npm_reference_server_answers_a_pinned_call_and_never_sees_our_secrets(
        everything, tmp_path, registry, providers, clock, monkeypatch):
    # Given a secret in this process's environment, and server-everything pinned
    monkeypatch.setenv("SEALFLOW_SECRET_NOT_FOR_SERVERS", "do-not-leak-0042")
    runtime, locked = _reference(tmp_path, clock, registry, providers,
                                 {"command": everything, "args": ["stdio"], "timeout": "60s"})
    providers["m"] = model = ScriptedAgent(Call("mcp.ref.get-sum", a=2, b=3), Call("mcp.ref.get-env"),
                                           {"answer": "5"})
    try:
        # When an agent adds two numbers with it, then reads the server's environment
        status = run(runtime, mcp_step(_pinned_ref(locked, "get-sum"), _pinned_ref(locked, "get-env"),
                                       permissions=()))
        # Then the sum came back as framed data, and the server's environment holds none of ours
        assert status.state == "completed", status.run.error_message
        total, env = model.requests[2].transcript
        assert total["status"] == "ok" and "5" in json.dumps(total["result"]["data"])
        assert env["status"] == "ok" and "do-not-leak-0042" not in json.dumps(env["result"])
        assert "SEALFLOW_SECRET" not in json.dumps(env["result"])
    finally:
        runtime.close()
        runtime.store.close()
