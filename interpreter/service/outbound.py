"""Outbound HTTP requests the runtime makes on its own (approval notifications, the OIDC code exchange).

One request, no redirects followed (a 3xx is returned as it is), bounded by ``timeout`` in total (every
socket operation, and the whole exchange: an answer dripped a byte at a time is cut when the time is up), at
most ``read_at_most`` bytes of the answer read. A failure is an :class:`OutboundError`
whose message names what went wrong (a timeout, a refused connection, TLS) but never the URL, which may be
a credential (a Slack webhook URL).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from urllib.parse import urlsplit


class OutboundError(Exception):
    """A request failed; the message says why, without the URL."""


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as an absolute http(s) URL with a host and a valid port (None: nothing), in
    words that never repeat the URL; garbage a URL parser chokes on (``http://[::1``) is said so, not raised."""
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return "the URL is not an absolute http:// or https:// URL"
        port = parts.port
    except ValueError:  # an unclosed IPv6 bracket, a port that is not a number or out of range
        return "the URL is not an absolute http:// or https:// URL" if "[" in url and "]" not in url \
            else "the URL's port is not a number from 1 to 65535"
    if port == 0:
        return "the URL's port is not a number from 1 to 65535"
    return None


def request(method: str, url: str, *, body: bytes = b"", headers: dict[str, str] | None = None, timeout: float,
            read_at_most: int = 64 * 1024) -> tuple[int, bytes]:
    """``(status, the first read_at_most bytes of the answer)`` of one request to an http(s) ``url``."""
    problem = url_problem(url)
    if problem is not None:
        raise OutboundError(problem)
    parts = urlsplit(url)
    host = parts.hostname or ""  # url_problem made sure there is one
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, parts.port, timeout=timeout, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    expired = threading.Event()

    def cut() -> None:  # the whole exchange is over time: end it (a blocked read returns at once)
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(timeout, cut)
    timer.daemon = True
    timer.start()
    timed_out = OutboundError(f"timed out after {timeout:g} s")
    try:
        conn.request(method, path, body=body or None, headers={"user-agent": "sealflow", **(headers or {})})
        if expired.is_set():  # the time was up while connecting: no socket to cut then
            raise timed_out
        response = conn.getresponse()
        answer = response.status, response.read(read_at_most)
        if expired.is_set():  # what was read may be cut short
            raise timed_out
        return answer
    except TimeoutError:
        raise timed_out from None
    except ssl.SSLError as exc:
        raise (timed_out if expired.is_set() else OutboundError(f"TLS failed ({type(exc).__name__})")) from None
    except OSError as exc:
        raise (timed_out if expired.is_set() else OutboundError(f"connection failed ({type(exc).__name__})")) \
            from None
    except http.client.InvalidURL:  # a control character or a space in the path
        raise OutboundError("the URL has a character a request line cannot carry (a space, a control "
                            "character)") from None
    except http.client.HTTPException as exc:
        raise (timed_out if expired.is_set() else OutboundError(f"bad HTTP answer ({type(exc).__name__})")) \
            from None
    except UnicodeError:  # a path or header that is not ASCII: its text is not repeated (it may be a credential)
        raise OutboundError("the URL or a header has a character that is not ASCII (percent-encode it)") from None
    finally:
        timer.cancel()
        conn.close()
