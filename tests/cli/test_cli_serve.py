"""`sealflow serve` against a live server on loopback (a subprocess on a free port), `sealflow tokens`, and
`sealflow runs list`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from private_services import free_port, stop_process, wait_http_ready

from sealflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "definitions" / "lead-qualification.v1.yaml")
ACCESS = """\
tenants:
  acme:
    roles: {sales: [crm:read, crm:write, email:send], sales-manager: [crm:read]}
    members: {user:ana: [sales], user:ben: [sales-manager]}
"""


ENTRY = "import sys; from sealflow.cli import main; sys.exit(main(sys.argv[1:]))"


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def world(tmp_path, capsys):
    """A store that has run lead-qualification once (so development mode submits it by name), an access
    policy, and tokens of ana and ben in acme."""
    store = f"sqlite:///{tmp_path}/state.db"
    access = tmp_path / "access.yaml"
    access.write_text(ACCESS)
    common = ("--store", store, "--access", str(access), "--tenant", "acme")
    code, _, err = cli(capsys, "submit", EXAMPLE, "--input", '{"lead_id": "lead_midco"}', "--as", "user:ana", *common)
    assert code == 0, err
    tokens = {}
    for who in ("ana", "ben"):
        code, out, err = cli(capsys, "tokens", "create", "--principal", f"user:{who}", "--tenant", "acme",
                             "--expires", "1h", "--store", store, "--json")
        assert code == 0, err
        tokens[who] = json.loads(out)
    return {"store": store, "access": str(access), "tokens": tokens, "common": common}


def test_under_an_access_policy_a_member_manages_its_own_tokens_and_an_operator_anyones(world, tmp_path, capsys):
    # Given the access policy with an operator added; ana and ben are members of acme, not operators
    policy = tmp_path / "with-operator.yaml"
    policy.write_text("operators: [user:root]\n" + ACCESS)
    store = ("--store", world["store"], "--access", str(policy))
    ana_id, ben_id = world["tokens"]["ana"]["id"], world["tokens"]["ben"]["id"]

    def tokens(*argv, who):
        return cli(capsys, "tokens", *argv, *store, "--as", who)

    # When ana creates a token for ben, or for herself in a tenant where she holds no role, or revokes ben's
    for argv, says in ((("create", "--principal", "user:ben", "--tenant", "acme"), "only an operator of the access"),
                       (("create", "--principal", "user:ana", "--tenant", "globex"), "holds no role in tenant"),
                       (("revoke", ben_id), "it is not one of its own")):
        code, out, err = tokens(*argv, who="user:ana")
        # Then each is refused, saying why, and nothing is printed or changed
        assert code == 1 and says in err and "sf_" not in out, (argv, err)
    # When she creates one for herself in acme, lists the tokens and revokes her own / Then each is allowed, and
    # the list shows only hers
    code, out, err = tokens("create", "--principal", "user:ana", "--tenant", "acme", "--json", who="user:ana")
    assert code == 0 and json.loads(out)["token"].startswith("sf_"), err
    code, out, _ = tokens("list", "--json", who="user:ana")
    assert code == 0 and {t["principal"] for t in json.loads(out)} == {"user:ana"} and len(json.loads(out)) == 2
    code, out, _ = tokens("revoke", ana_id, who="user:ana")
    assert code == 0 and "revoked" in out
    # And the operator lists everyone's and revokes ben's
    code, out, _ = tokens("list", "--json", who="user:root")
    assert code == 0 and {t["principal"] for t in json.loads(out)} == {"user:ana", "user:ben"}
    code, out, _ = tokens("revoke", ben_id, who="user:root")
    assert code == 0 and "revoked" in out


def test_tokens_are_listed_without_their_secret_and_revoked(world, capsys):
    code, out, _ = cli(capsys, "tokens", "list", "--store", world["store"], "--json")
    listed = json.loads(out)
    assert code == 0 and {t["principal"] for t in listed} == {"user:ana", "user:ben"}
    assert world["tokens"]["ana"]["token"] not in out and "secret" not in out
    code, out, _ = cli(capsys, "tokens", "revoke", world["tokens"]["ana"]["id"], "--store", world["store"])
    assert code == 0 and "revoked" in out
    code, _, err = cli(capsys, "tokens", "revoke", "nope", "--store", world["store"])
    assert code == 2 and "no API token 'nope'" in err
    code, _, err = cli(capsys, "tokens", "create", "--principal", "user:x", "--expires", "soon", "--store",
                       world["store"])
    assert code == 2 and "not a duration" in err


def test_runs_list_shows_the_tenant_s_runs_filtered(world, capsys):
    code, out, _ = cli(capsys, "runs", "list", *world["common"], "--as", "user:ana", "--json")
    (run,) = json.loads(out)
    assert code == 0 and run["workflow"] == "lead-qualification" and run["state"] == "queued"
    code, out, _ = cli(capsys, "runs", "list", *world["common"], "--as", "user:ana", "--state", "completed", "--json")
    assert json.loads(out) == []
    code, out, _ = cli(capsys, "runs", "list", *world["common"], "--as", "user:ana")
    assert code == 0 and "lead-qualification v1" in out
    code, out, _ = cli(capsys, "runs", "list", *world["common"], "--as", "user:zed", "--json")
    assert json.loads(out) == []


def test_serve_refuses_to_start_without_an_access_policy(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SEALFLOW_ACCESS", raising=False)
    code, _, err = cli(capsys, "serve", "--store", f"sqlite:///{tmp_path}/s.db")
    assert code == 1 and "without an access policy" in err
    assert "OPEN DEVELOPMENT MODE" not in err  # it refuses: no warning that it would serve in open mode
    code, _, err = cli(capsys, "serve", "--store", f"sqlite:///{tmp_path}/s.db", "--allow-open", "--oidc-issuer", "x")
    assert code == 2 and "OIDC needs all of" in err


def test_serve_says_why_it_cannot_listen_before_it_starts(tmp_path, capsys):
    import socket

    store = f"sqlite:///{tmp_path}/s.db"
    # Given a port another process listens on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # When serve is asked for it / Then it fails at once saying so (exit 1, not uvicorn's 3), naming the address
        code, _, err = cli(capsys, "serve", "--store", store, "--allow-open", "--port", str(port))
        assert code == 1 and f"cannot listen on 127.0.0.1:{port}: the address is already in use" in err
    # And an address that is not this machine's, and a host name that does not resolve, are named as such
    code, _, err = cli(capsys, "serve", "--store", store, "--allow-open", "--host", "192.0.2.1")
    assert code == 1 and "the address is not one of this machine's" in err
    code, _, err = cli(capsys, "serve", "--store", store, "--allow-open", "--host", "no-such-host.invalid")
    assert code == 1 and "the host name does not resolve" in err


@pytest.mark.slow
def test_a_live_server_submits_runs_and_takes_an_approval_over_http(world, tmp_path):
    # Given `sealflow serve` on a free loopback port, working the runs itself
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", ENTRY, "serve", "--port", str(port), "--store",
                             world["store"], "--access", world["access"], "--actions", "sealflow.demo"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    ana = {"Authorization": f"Bearer {world['tokens']['ana']['token']}"}
    ben = {"Authorization": f"Bearer {world['tokens']['ben']['token']}"}
    try:
        wait_http_ready(proc, base + "/readyz", attempts=200)
        with httpx.Client(base_url=base, timeout=10) as http:
            # When ana submits a high-value lead without and then with her token
            anonymous = http.post("/v1/runs", json={"workflow": "lead-qualification"})
            created = http.post("/v1/runs", json={"workflow": "lead-qualification", "input": {"lead_id": "lead_acme"}},
                                headers={**ana, "Idempotency-Key": "k1"})
            # Then the first is refused and the second runs until the sales manager's approval
            assert anonymous.status_code == 401 and anonymous.json()["type"].endswith("unauthenticated")
            assert created.status_code == 201, created.text
            run_id = created.json()["run_id"]
            state = _until(http, run_id, ana, {"waiting", "completed", "failed"})
            assert state == "waiting"
            (gate,) = [g for g in http.get("/v1/approvals", headers=ben).json() if g["run_id"] == run_id]
            decided = http.post(f"/v1/approvals/{run_id}/{gate['step']}", headers=ben,
                                json={"decision": "approve", "payload_hash": gate["show_hash"]})
            assert decided.status_code == 200, decided.text
            assert _until(http, run_id, ana, {"completed", "failed"}) == "completed"
            listed = http.get("/v1/runs", params={"state": "completed"}, headers=ana).json()["runs"]
            assert run_id in [r["run_id"] for r in listed] and {r["state"] for r in listed} == {"completed"}
            assert "/v1/runs" in http.get("/openapi.json").json()["paths"]
    finally:
        stop_process(proc, signal.SIGTERM)


def _until(http, run_id, headers, states, timeout=30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        state = http.get(f"/v1/runs/{run_id}", headers=headers).json()["state"]
        if state in states or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


WAITING = """\
sealflow: 1
name: pause
version: 1
owner: team:test
steps:
  - {id: pause, wait: {for: 4s}}
  - {id: done, succeed: {}}
"""


@pytest.mark.slow
def test_run_follow_and_status_watch_go_through_a_short_wait_to_the_end(tmp_path, capsys):
    # Given a workflow that waits 4 seconds (longer than the 3 s the plain commands sleep through)
    path = tmp_path / "pause.v1.yaml"
    path.write_text(WAITING)
    store = ("--store", f"sqlite:///{tmp_path}/s.db")
    # When it is run plainly, it stops waiting (exit 3); `status --watch` then carries it to its end
    code, out, _ = cli(capsys, "run", str(path), *store)
    assert code == 3
    run_id = out.split()[1].rstrip(":")
    code, out, _ = cli(capsys, "status", run_id, "--watch", *store)
    assert code == 0 and "completed" in out
    # And `run --follow` goes through the wait itself
    code, out, _ = cli(capsys, "run", str(path), "--follow", *store, "--json")
    assert code == 0 and json.loads(out)["state"] == "completed"
