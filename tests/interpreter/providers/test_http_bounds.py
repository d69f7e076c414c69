"""The model adapters' one HTTP call reads a bounded answer: a server that sends more than
``MAX_ANSWER_BYTES`` fails the call with ``invalid_output``, and the worker never holds more of it."""

from __future__ import annotations

import http.server
import threading

import pytest

from sealflow.core.errors import StepError
from sealflow.providers import http as model_http


class _Flood(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as model servers do
    size = 0

    def do_POST(self):  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(self.size))
        self.end_headers()
        chunk = b" " * 65536
        left = self.size
        try:
            while left > 0:
                self.wfile.write(chunk[:left])
                left -= len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def flood():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flood)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_an_answer_over_the_bound_fails_as_invalid_output(flood, monkeypatch):
    # Given a model server that answers with 3 MB, and a bound of 1 MB
    monkeypatch.setattr(model_http, "MAX_ANSWER_BYTES", 1_000_000)
    _Flood.size = 3_000_000
    url = f"http://127.0.0.1:{flood.server_address[1]}/v1/chat/completions"
    # When a call is made / Then it fails as invalid_output naming the host and the bound
    with pytest.raises(StepError, match=r"sent an answer of more than 1000000 bytes") as got:
        model_http.post_json(url, {"q": 1}, {}, timeout=10)
    assert got.value.error_class == "invalid_output"


def test_an_answer_under_the_bound_is_read_whole_and_the_connection_kept(flood, monkeypatch):
    # Given a model server that answers with 500 KB, under a 1 MB bound
    monkeypatch.setattr(model_http, "MAX_ANSWER_BYTES", 1_000_000)
    _Flood.size = 500_000
    url = f"http://127.0.0.1:{flood.server_address[1]}/v1/chat/completions"
    # When two calls are made / Then each reads the whole body, the second on the same kept-alive connection
    first = model_http.post_json(url, {"q": 1}, {}, timeout=10)
    conn = model_http._local.pool[("http", f"127.0.0.1:{flood.server_address[1]}")]
    second = model_http.post_json(url, {"q": 2}, {}, timeout=10)
    assert len(first.body) == len(second.body) == 500_000
    assert model_http._local.pool[("http", f"127.0.0.1:{flood.server_address[1]}")] is conn
