"""Helpers of the MCP tests: the tests' own server (tests/mcp_test_server.py) over stdio or Streamable HTTP on
127.0.0.1, and a project folder naming servers."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

SERVER = Path(__file__).resolve().parent / "mcp_test_server.py"
BIN = Path(sys.executable).parent


def stdio_spec(variant: str = "base", **env: str) -> dict:
    """The ``mcp:`` entry of the tests' own server over stdio."""
    return {"command": sys.executable, "args": [str(SERVER), "stdio"], "timeout": "30s",
            "env": {"MCP_TEST_VARIANT": variant, **env}}


def write_project(root: Path, servers: dict, **more) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "sealflow.yaml"
    path.write_text(yaml.safe_dump({"mcp": servers, **more}, sort_keys=False))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(proc: subprocess.Popen, port: int) -> None:
    """Until the child process listens on 127.0.0.1:``port`` (its stderr in the error if it exits first)."""
    for _ in range(400):
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read().decode()[-3000:] if proc.stderr else ''}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the server did not listen on port {port}")


@contextlib.contextmanager
def http_server(token: str, variant: str = "base") -> Iterator[str]:
    """The tests' own server over Streamable HTTP on 127.0.0.1 (a random port), requiring ``Bearer token``."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(port), token],
                            env={**os.environ, "MCP_TEST_VARIANT": variant}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        wait_listening(proc, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
