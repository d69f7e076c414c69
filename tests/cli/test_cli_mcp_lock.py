"""``mcp:`` in the project file and ``sealflow mcp lock`` (issue 36), against real MCP servers on this machine:
the reference ``mcp-server-time`` and ``mcp-server-git`` (PyPI) over stdio, and the tests' own server over
stdio and over Streamable HTTP with a secret header."""

from __future__ import annotations

import json
import subprocess

import pytest

from sealflow.cli import main
from sealflow.dsl import mcp_lock
from tests.mcp_helpers import BIN, http_server, stdio_spec, write_project


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("SEALFLOW_PROJECT", raising=False)
    monkeypatch.delenv("SEALFLOW_CONFIG", raising=False)


def test_lock_pins_the_tools_of_the_reference_time_server(tmp_path, capsys, monkeypatch):
    # Given a project naming mcp-server-time (stdio)
    write_project(tmp_path, {"time": {"command": str(BIN / "mcp-server-time"), "args": ["--local-timezone", "UTC"],
                                      "timeout": "30s"}})
    monkeypatch.chdir(tmp_path)
    # When the tools are locked
    code, out, err = cli(capsys, "mcp", "lock")
    # Then sealflow.mcp.lock beside the project file holds each tool with a digest of each part, sorted
    assert code == 0, err
    text = (tmp_path / "sealflow.mcp.lock").read_text()
    lock = mcp_lock.parse(text, "lock")
    assert sorted(lock) == ["time/convert_time", "time/get_current_time"]
    entry = json.loads(text)["servers"]["time"]["tools"]["get_current_time"]
    assert entry["input_schema_digest"] == mcp_lock.digest(entry["input_schema"])
    assert entry["description_digest"].startswith("sha256:") and "output_schema_digest" in entry
    # And locking again writes the same bytes; --check agrees
    assert cli(capsys, "mcp", "lock")[0] == 0 and (tmp_path / "sealflow.mcp.lock").read_text() == text
    assert cli(capsys, "mcp", "lock", "--check")[0] == 0


def test_lock_reads_the_reference_git_server(tmp_path, capsys, monkeypatch):
    # Given a project naming mcp-server-git on a real repository
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    write_project(tmp_path, {"git": {"command": str(BIN / "mcp-server-git"), "args": ["--repository", str(repo)]}})
    monkeypatch.chdir(tmp_path)
    # When the tools are locked
    code, out, err = cli(capsys, "mcp", "lock")
    # Then its tools are pinned (git_status among them)
    assert code == 0, err
    assert "git/git_status" in mcp_lock.read(tmp_path / "sealflow.mcp.lock")


def test_check_fails_when_a_tool_changed_since_the_lock(tmp_path, capsys, monkeypatch):
    # Given a lock of the tests' own server
    write_project(tmp_path, {"own": stdio_spec("base")})
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "mcp", "lock")[0] == 0
    # When the server now lists another schema for lookup and the lock is checked
    write_project(tmp_path, {"own": stdio_spec("schema")})
    code, out, err = cli(capsys, "mcp", "lock", "--check")
    # Then it fails, showing the change, and writes nothing
    assert code == 1 and "include_payment_details" in out and "not what the servers list now" in err
    assert "include_payment_details" not in (tmp_path / "sealflow.mcp.lock").read_text()


def test_lock_over_streamable_http_sends_the_secret_header(tmp_path, capsys, monkeypatch):
    # Given the tests' own server over HTTP, which wants a bearer token, named with {secret: NAME}
    with http_server("s3cret-token-value") as url:
        write_project(tmp_path, {"own": {"url": url, "headers": {"Authorization": {"secret": "OWN_TOKEN"}}}})
        monkeypatch.chdir(tmp_path)
        # When the secret is missing, then the lock fails naming it (never a value)
        code, out, err = cli(capsys, "mcp", "lock")
        assert code == 1 and "OWN_TOKEN" in err
        # When the secret is wrong, then the server's refusal is named
        monkeypatch.setenv("SEALFLOW_SECRET_OWN_TOKEN", "Bearer wrong-token-value")
        code, out, err = cli(capsys, "mcp", "lock")
        assert code == 1 and "own" in err and "wrong-token-value" not in err
        # When it resolves, then the tools are locked
        monkeypatch.setenv("SEALFLOW_SECRET_OWN_TOKEN", "Bearer s3cret-token-value")
        code, out, err = cli(capsys, "mcp", "lock")
        assert code == 0, err
    lock = mcp_lock.read(tmp_path / "sealflow.mcp.lock")
    assert {"own/lookup", "own/echo"} <= set(lock)
    assert "s3cret" not in (tmp_path / "sealflow.mcp.lock").read_text()


@pytest.mark.parametrize("servers, where, message", [
    ({"time": {"command": "x", "timeout": "forever"}}, ":4:14", "mcp.time.timeout"),
    ({"time": {"command": "x", "url": "http://127.0.0.1:1/mcp"}}, ":3:5", "either command"),
    ({"Bad-Name": {"command": "x"}}, ":3:5", "server name"),
    ({"t": {"url": "ftp://x"}}, ":3:10", "mcp.t.url"),
    ({"t": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": {"secrt": "X"}}}}, ":6:9", "{secret"),
    ({"t": {"command": "x", "cwd": "/"}}, ":3:5", "unknown key 'cwd'"),
    ({"t": {"command": "x", "calls_per_minute": 0}}, ":4:23", "mcp.t.calls_per_minute"),
])
def test_a_bad_mcp_section_is_a_located_usage_error(tmp_path, capsys, monkeypatch, servers, where, message):
    # Given a project whose mcp: section is wrong
    path = write_project(tmp_path, servers)
    monkeypatch.chdir(tmp_path)
    # When any command reads it
    code, out, err = cli(capsys, "mcp", "lock")
    # Then it is a usage error naming file:line:column and the key
    assert code == 2, err
    assert f"{path}{where}" in err and message in err


def test_lock_without_a_project_or_servers_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "mcp", "lock")[0] == 2
    (tmp_path / "sealflow.yaml").write_text("sealflow: 1\n")
    code, out, err = cli(capsys, "mcp", "lock")
    assert code == 2 and "no mcp: servers" in err


def test_a_hand_edited_lock_is_refused():
    # Given a lock whose digest no longer says what it holds
    tool = mcp_lock.LockedTool("own", "lookup", "The status.", {"type": "object"}, None)
    text = mcp_lock.render({"own/lookup": tool}).replace("The status.", "The status. Also send mail.")
    # When it is read, then it is refused naming the tool and the part
    with pytest.raises(mcp_lock.LockError, match="servers.own.tools.lookup: description_digest"):
        mcp_lock.parse(text, "sealflow.mcp.lock")


@pytest.mark.parametrize("spec, said", [
    ({"command": "/bin/sh", "args": ["-c", "echo boom: no config >&2; exit 3"]}, "closed the connection"),
    ({"command": "/nonexistent/mcp-server"}, "cannot be reached"),
    ({"command": "/bin/sleep", "args": ["30"], "timeout": "1s"}, "did not answer within 1s"),
    ({"url": "http://127.0.0.1:9/mcp", "timeout": "3s"}, "cannot be reached"),
])
def test_a_server_that_cannot_be_listed_fails_the_lock_saying_why(tmp_path, capsys, monkeypatch, spec, said):
    # Given a server that exits at once (saying why on stderr), does not exist, never answers, or does not listen
    write_project(tmp_path, {"srv": spec})
    monkeypatch.chdir(tmp_path)
    # When the tools are locked
    code, out, err = cli(capsys, "mcp", "lock")
    # Then it fails naming the server and what happened (its stderr's end when it said something); nothing written
    assert code == 1 and "MCP server 'srv'" in err and said in err and "Traceback" not in err
    assert not (tmp_path / "sealflow.mcp.lock").exists()
    if "boom" in str(spec):
        assert "boom: no config" in err
