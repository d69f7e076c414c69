"""`sealflow serve --workers 2` live on loopback: a /ui session and the per-principal rate limit hold across
the server's processes (each request on a new connection, so the kernel spreads them over the processes).

Given / When / Then in the test.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from private_services import free_port, stop_process, wait_http_ready

from sealflow.server import tokens
from sealflow.store import open_store

ENTRY = "import sys; from sealflow.cli import main; sys.exit(main(sys.argv[1:]))"
ACCESS = """\
tenants:
  acme:
    roles: {manager: [crm:read]}
    members: {user:bob: [manager]}
"""
#: the rate limit of the test: bursts of 3, one request per 100 s on average (a window of 300 s)
RATE, BURST = 0.01, 3


@pytest.mark.slow
def test_serve_with_two_workers_shares_sessions_and_rate_limits(tmp_path):
    # Given a store with bob's API token, and `sealflow serve --workers 2` on it
    url = f"sqlite:///{tmp_path}/state.db"
    store = open_store(url)
    text, _ = tokens.create(store, "user:bob", "acme", time.time(), actor="user:root")
    store.close()
    (tmp_path / "access.yaml").write_text(ACCESS)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", ENTRY, "serve", "--port", str(port), "--workers", "2",
                             "--store", url, "--access", str(tmp_path / "access.yaml"), "--no-work",
                             "--rate-limit", str(RATE), "--rate-burst", str(BURST)],
                            cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http_ready(proc, base + "/readyz")
        # When bob signs in through the /ui form
        with httpx.Client(base_url=base, timeout=10) as browser:
            form = browser.get("/ui/signin")
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)
            done = browser.post("/ui/signin", data={"csrf_token": csrf, "token": text})
            assert done.status_code == 303, done.text
            session = done.cookies["sealflow_session"]
        # Then his session is known to whichever process answers each new connection
        pages = [httpx.get(base + "/ui/approvals", cookies={"sealflow_session": session}, timeout=10)
                 for _ in range(16)]
        assert [p.status_code for p in pages] == [200] * 16 and all("user:bob" in p.text for p in pages)
        # When bob makes 12 API calls, each on a new connection
        started = time.monotonic()
        codes = [httpx.get(base + "/v1/runs", headers={"Authorization": f"Bearer {text}"}, timeout=10).status_code
                 for _ in range(12)]
        windows = 1 + int((time.monotonic() - started) // (BURST / RATE))
        # Then the processes together grant the burst (per window passed: one unless the machine stalled 300 s)
        assert BURST <= codes.count(200) <= BURST * windows and set(codes) <= {200, 429}, codes
    finally:
        stop_process(proc, signal.SIGINT)
