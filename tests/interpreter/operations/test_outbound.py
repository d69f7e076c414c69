"""service/outbound.py: one outbound request is bounded in total, not only per socket operation.

A receiver (a notification webhook, an OIDC token endpoint) that drips its answer a byte at a time, each byte
well within the per-operation timeout, must not hold the caller (the deliverer's one thread, a server request)
for longer than the request's timeout."""

from __future__ import annotations

import socket
import threading

import pytest

from sealflow.operations import outbound

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-padding: " + b"p" * 40 + b"\r\n\r\nok"


class Drip:
    """A loopback server that sends ANSWER one byte every ``every`` seconds (each well within a timeout)."""

    def __init__(self, every: float):
        self.every = every
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            for byte in ANSWER:
                if self.stop.wait(self.every):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def __enter__(self):
        self.thread.start()
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.sock.close()


def test_an_answer_dripped_a_byte_at_a_time_is_cut_at_the_requests_timeout():
    # Given a receiver that drips its 200 answer over ~6 s, every byte 0.1 s after the last
    # When a request with a 1 s timeout is made to it
    # Then it fails as timed out (in total), instead of waiting for the whole answer
    with Drip(every=0.1) as url, pytest.raises(outbound.OutboundError, match="timed out after 1 s"):
        outbound.request("POST", url, body=b"{}", timeout=1.0)


def test_a_prompt_answer_is_read_as_before():
    # Given a receiver that answers at once / When requested / Then the status and the body come back
    with Drip(every=0.0) as url:
        assert outbound.request("GET", url, timeout=5.0) == (200, b"ok")


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/services/T/B/S\u00c9CRET", "http://127.0.0.1:9/a b/SECRET"])
def test_a_url_http_cannot_send_is_an_outbound_error_that_does_not_repeat_it(url):
    # Given a URL (a secret's value: a Slack URL) with a character a request line cannot carry
    # When requested / Then an OutboundError says so, without the URL, instead of a UnicodeEncodeError
    with pytest.raises(outbound.OutboundError) as err:
        outbound.request("POST", url, body=b"{}", timeout=2.0)
    assert "SECRET" not in str(err.value) and "the URL" in str(err.value)
