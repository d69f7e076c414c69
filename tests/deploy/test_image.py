"""The container image's recipe (tools/deploy/Containerfile) and its health check (tools/deploy/healthcheck.py).
The image itself is built and run by tools/deploy/build-image.sh, which .ci/run calls before the tests."""

from __future__ import annotations

import http.server
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tools.deploy import healthcheck

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "tools" / "deploy"


def stages() -> list[list[str]]:
    """The Containerfile's instructions (continuation lines joined), one list per stage."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Containerfile").read_text())
    out: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("ARG") and not out:
            continue
        if line.startswith("FROM "):
            out.append([])
        out[-1].append(line)
    return out


def test_the_image_is_multi_stage_non_root_with_sealflow_as_entry_point_and_a_health_check():
    # Given the Containerfile's stages
    build, final = stages()
    # Then the build stage installs from the wheels only (nothing fetched), and the final stage copies its result
    assert any("--no-index --find-links /wheels" in line for line in build)
    assert "COPY --from=build /opt/sealflow /opt/sealflow" in final
    # and neither installs system packages (the base is Debian minbase with python3: no compiler anywhere)
    assert not any(re.search(r"apt-get|apt |dpkg -i|gcc|build-essential", line) for line in build + final)
    # and the final stage runs as a non-root user, sealflow is its entry point, its health check is wired
    (user,) = [line for line in final if line.startswith("USER ")]
    assert user == "USER 10001:10001"
    assert 'ENTRYPOINT ["sealflow"]' in final
    (check,) = [line for line in final if line.startswith("HEALTHCHECK ")]
    assert check.endswith('CMD ["sealflow-healthcheck"]')
    assert "COPY healthcheck.py /usr/local/bin/sealflow-healthcheck" in final


def test_the_compose_health_checks_ask_each_process_where_it_listens():
    # Given the compose services of the sealflow image
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    for name in ("worker-1", "scheduler", "server"):
        command, test = services[name]["command"], services[name]["healthcheck"]["test"]
        assert test[:2] == ["CMD", "sealflow-healthcheck"], name
        # Then the server is asked for its readiness on its --port, a worker or the scheduler on its --metrics-port
        if command[0] == "serve":
            assert test[2] == f"http://127.0.0.1:{command[command.index('--port') + 1]}/readyz"
        else:
            assert test[2] == f"http://127.0.0.1:{command[command.index('--metrics-port') + 1]}/metrics", name


class _Answers(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        status = 200 if self.path == "/readyz" else 503
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_the_health_check_passes_on_200_and_fails_on_anything_else(server, capsys, monkeypatch):
    # Given a server answering 200 on /readyz and 503 elsewhere, and a port nobody listens on
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/readyz"
    # When the health check asks each, Then 200 passes silently; 503 and a refused connection fail with one line
    assert healthcheck.main(["sealflow-healthcheck", f"{server}/readyz"]) == 0
    assert capsys.readouterr().err == ""
    assert healthcheck.main(["sealflow-healthcheck", f"{server}/metrics"]) == 1
    assert "HTTP Error 503" in capsys.readouterr().err
    assert healthcheck.main(["sealflow-healthcheck", closed]) == 1
    assert "URLError" in capsys.readouterr().err
    # and without an argument it asks $SEALFLOW_HEALTH_URL
    monkeypatch.setenv("SEALFLOW_HEALTH_URL", f"{server}/readyz")
    assert healthcheck.main(["sealflow-healthcheck"]) == 0


def test_ci_builds_the_image_and_runs_its_smoke_test_before_the_tests():
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert "tools/deploy/build-image.sh" in ci_run
    assert ci_run.index("tools/deploy/build-image.sh") < ci_run.index("-m pytest")
