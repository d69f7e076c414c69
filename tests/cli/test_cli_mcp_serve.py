"""`sealflow mcp serve` (issue 36): the project's workflows as MCP tools, tested with the official SDK's client
against the real command (a child process) over Streamable HTTP on 127.0.0.1 and over stdio.

A signed workflow starts a run as the API token's principal; an unsigned one (under a trust policy) and one the
principal may not start (the access policy) are refused; a run that waits for approval answers at once with its
state and the approvals page's link; ``run_status`` reads a run; a request without a token is refused."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sealflow.cli import main
from tests.mcp_helpers import free_port, wait_listening

SEALFLOW = str(Path(sys.executable).parent / "sealflow")
APPROVALS = "https://sealflow.example/ui/approvals"


def definition(name: str, *, permissions=(), steps: str) -> str:
    return (f"sealflow: 1\nname: {name}\nversion: 1\nowner: team:ops\ndescription: The {name} workflow.\n"
            "input:\n  schema: {type: object, required: [who], properties: {who: {type: string}}}\n"
            f"permissions: [{', '.join(permissions)}]\nsteps:\n{steps}")


HELLO = definition("hello", steps='  - id: done\n    succeed:\n      output: {greeting: "hello ${{ input.who }}"}\n')
REVIEW = definition("review", steps=(
    "  - id: check\n    approval:\n      approvers: [role:lead]\n      timeout: 1h\n"
    '  - id: done\n    succeed:\n      output: {approved: "${{ input.who }}"}\n'))
PAYOUT = definition("payout", permissions=("billing:pay",), steps=(
    '  - id: done\n    succeed:\n      output: {paid: "${{ input.who }}"}\n'))
DRAFT = definition("draft", steps='  - id: done\n    succeed:\n      output: {draft: "${{ input.who }}"}\n')
ACCESS = {"tenants": {"acme": {"roles": {"member": ["runs:read"], "lead": ["runs:read"], "payer": ["billing:pay"]},
                               "members": {"user:ana": ["member"], "user:lee": ["lead"]}}}}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Definitions (three signed, one not), a key and a trust policy, an access policy, a store, ana's token."""
    root = tmp_path_factory.mktemp("mcp-serve")
    defs = root / "definitions"
    defs.mkdir()
    for name, text in (("hello", HELLO), ("review", REVIEW), ("payout", PAYOUT), ("draft", DRAFT)):
        (defs / f"{name}.v1.yaml").write_text(text)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        assert main(["keygen", "--out", "ops"]) == 0
        for name in ("hello", "review", "payout"):
            assert main(["sign", f"definitions/{name}.v1.yaml", "--key", "ops.pem", "--key-id", "ops"]) == 0
    finally:
        os.chdir(cwd)
    (root / "trust.yaml").write_text("keys:\n  - id: ops\n    public_key: ops.pub.pem\nnamespaces: {ops: [ops]}\n")
    (root / "access.yaml").write_text(yaml.safe_dump(ACCESS))
    store = f"sqlite:///{root}/state.db"
    from sealflow.server.tokens import create
    from sealflow.store import open_store
    from sealflow.store.serverstate import server_store

    opened = open_store(store)
    try:
        token, _ = create(server_store(opened), "user:ana", "acme", time.time(), actor="user:admin")
    finally:
        opened.close()
    return {"root": root, "store": store, "token": token}


def command(project, *more: str) -> list[str]:
    return [SEALFLOW, "mcp", "serve", "definitions", "--store", project["store"], "--access", "access.yaml",
            "--approvals-url", APPROVALS, *more]


@contextlib.contextmanager
def http_serve(project, *more: str):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEALFLOW_")}
    proc = subprocess.Popen(command(project, "--http", str(port), *more), cwd=project["root"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_listening(proc, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def _session(url: str, token: str | None, work):
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http, \
            streamable_http_client(url, http_client=http) as (read, write, _), ClientSession(read, write) as s:
        await s.initialize()
        return await work(s)


def test_an_sdk_client_starts_a_signed_workflow_and_is_refused_the_rest(project):
    with http_serve(project, "--trust", "trust.yaml") as url:
        async def work(s):
            listed = sorted(t.name for t in (await s.list_tools()).tools)
            hello = await s.call_tool("hello", {"who": "world"})
            draft = await s.call_tool("draft", {"who": "x"})
            payout = await s.call_tool("payout", {"who": "x"})
            review = await s.call_tool("review", {"who": "ana"})
            status = await s.call_tool("run_status", {"run_id": review.structuredContent["run_id"]})
            schema = next(t for t in (await s.list_tools()).tools if t.name == "hello").inputSchema
            return listed, hello, draft, payout, review, status, schema

        listed, hello, draft, payout, review, status, schema = asyncio.run(_session(url, project["token"], work))
    # Then the signed workflows are offered with their input schema, the unsigned one is not
    assert listed == ["hello", "payout", "review", "run_status"]
    assert schema["required"] == ["who"]
    # And the signed one ran as the token's principal, to its end
    assert not hello.isError and hello.structuredContent["state"] == "completed"
    assert hello.structuredContent["output"] == {"greeting": "hello world"}
    # And the unsigned one is refused, saying why; the one ana may not start is refused by the access policy
    assert draft.isError and "not offered" in draft.content[0].text and "untrusted" in draft.content[0].text
    assert payout.isError and "may not submit payout" in payout.content[0].text
    assert "billing:pay" in payout.content[0].text
    # And a run waiting for approval answers with its state and the approvals page, without blocking
    assert review.structuredContent["state"] == "waiting" and review.structuredContent["approve_at"] == APPROVALS
    assert review.structuredContent["waiting"]["approvers"] == ["role:lead"]
    assert status.structuredContent["state"] == "waiting"


def test_a_request_without_a_token_is_refused(project):
    import httpx

    with http_serve(project, "--trust", "trust.yaml") as url:
        answer = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            headers={"Accept": "application/json, text/event-stream"})
        bad = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                         headers={"Accept": "application/json, text/event-stream",
                                  "Authorization": "Bearer sf_0000000000000000_nope"})
    assert answer.status_code == 401 and "API token is required" in answer.text
    assert bad.status_code == 401


def test_over_stdio_in_development_mode_unsigned_workflows_are_offered_with_a_warning(project):
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=SEALFLOW, args=command(project)[1:], cwd=str(project["root"]),
                                   env={"SEALFLOW_MCP_TOKEN": project["token"], "PATH": os.environ["PATH"]})
    log = project["root"] / "stdio-stderr.txt"

    async def run():
        with open(log, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                listed = sorted(t.name for t in (await s.list_tools()).tools)
                draft = await s.call_tool("draft", {"who": "dev"})
                return listed, draft

    listed, draft = asyncio.run(run())
    # Then every workflow is offered (no trust policy), the unsigned one runs, and the warning is the one run gives
    assert listed == ["draft", "hello", "payout", "review", "run_status"]
    assert draft.structuredContent["state"] == "completed"
    assert "development mode" in log.read_text()


def test_stdio_without_a_token_does_not_start(project, capsys, monkeypatch):
    monkeypatch.delenv("SEALFLOW_MCP_TOKEN", raising=False)
    assert main(["mcp", "serve", "definitions"]) == 2
    assert "needs --token" in capsys.readouterr().err
