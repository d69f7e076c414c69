"""Outbound HTTP requests the runtime makes on its own (approval notifications, the OIDC code exchange).

One request, no redirects followed (a 3xx is returned as it is), bounded by ``timeout`` in total (every
socket operation, and the whole exchange: an answer dripped a byte at a time is cut when the time is up), at
most ``read_at_most`` bytes of the answer read. A failure is an :class:`OutboundError`
whose message names what went wrong (a timeout, a refused connection, TLS) but never the URL, which may be
a credential (a Slack webhook URL).

With an :class:`AddressGuard` (approval notifications: URLs an operator configured, posted to by every worker
and server) the request goes only to an address the guard allows, checked after resolution and before any
connection: the host is resolved once, every address it resolves to must be a public unicast one (not
loopback, link-local, private, unspecified, multicast, not globally routable, nor a cloud metadata endpoint;
an IPv4 address inside IPv6, mapped, 6to4 or NAT64, is judged as that IPv4 address) or inside a network the
operator allow-listed, and the connection is made to exactly those checked addresses, with the URL's host
name kept for the ``Host`` header and for TLS (SNI and certificate verification). Nothing is resolved again
between the check and the connection (no DNS rebinding), and no redirect is followed (no hop escapes it).
"""

from __future__ import annotations

import dataclasses
import http.client
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: what ``socket.connect`` takes for AF_INET (host, port) and AF_INET6 (host, port, flowinfo, scope id)
SocketAddress = tuple[str, int] | tuple[str, int, int, int]

#: instance metadata and platform endpoints of cloud providers: refused even where the address looks public
#: (Oracle's 192.0.0.192, Azure's WireServer 168.63.129.16) or is inside an allowed private range
METADATA: tuple[Network, ...] = tuple(ipaddress.ip_network(n) for n in (
    "169.254.169.254/32",   # AWS, GCP, Azure, OpenStack, DigitalOcean...
    "169.254.170.2/32",     # AWS ECS task metadata
    "fd00:ec2::254/128",    # AWS over IPv6
    "100.100.100.200/32",   # Alibaba Cloud
    "192.0.0.192/32",       # Oracle Cloud
    "168.63.129.16/32",     # Azure WireServer
))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class OutboundError(Exception):
    """A request failed; the message says why, without the URL."""


class AddressRefused(OutboundError):
    """The URL's host is, or resolves to, an address the guard refuses; nothing was connected to."""


def embedded_v4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries to the IPv4 internet (mapped ``::ffff:a.b.c.d``, 6to4, NAT64)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_kind(address: Address) -> str | None:
    """What kind of non-public address ``address`` is (``a loopback address``...), None for a public unicast
    one: the kinds a guarded request refuses unless allow-listed."""
    if any(address in net for net in METADATA):
        return "a cloud metadata address"
    inner = embedded_v4(address)
    if inner is not None:
        return address_kind(inner)
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "an address that is not publicly routable"
    return None


def parse_networks(entries: Iterable[Any]) -> tuple[Network, ...]:
    """Networks from ``127.0.0.1/32``, ``10.20.0.0/16``, ``fd00::/8`` or a bare address (one host); a
    ValueError naming the first entry that is none."""
    found: list[Network] = []
    for entry in entries:
        try:
            if not isinstance(entry, str):
                raise ValueError
            found.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{str(entry)[:80]!r} is not an IP address or network (write 10.20.0.0/16 or "
                             "127.0.0.1)") from None
    return tuple(found)


@dataclasses.dataclass(frozen=True)
class AddressGuard:
    """Where a guarded request may connect: public unicast addresses, and any address inside ``allow`` (the
    networks an operator allow-listed; ``where`` names that setting in a refusal)."""

    allow: tuple[Network, ...] = ()
    where: str = "the allow-list"

    def refuses(self, address: Address) -> str | None:
        """The kind of address refused (see :func:`address_kind`), or None when a request may go there."""
        inner = embedded_v4(address)
        if any(address in net or (inner is not None and inner in net) for net in self.allow):
            return None
        return address_kind(address)

    def resolve(self, host: str, port: int) -> list[tuple[int, SocketAddress]]:
        """``(family, socket address)`` of every address ``host`` has, resolved once, each allowed; else
        :class:`AddressRefused` (or :class:`OutboundError` when the name does not resolve), before any
        connection is made."""
        try:
            literal: Address | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:  # no resolver asked
            found: list[tuple[int, SocketAddress]] = [
                (socket.AF_INET6 if literal.version == 6 else socket.AF_INET,
                 (str(literal), port, 0, 0) if literal.version == 6 else (str(literal), port))]
        else:
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError):
                raise OutboundError("the URL's host name does not resolve") from None
            found = list(dict.fromkeys((family, sockaddr) for family, _, _, _, sockaddr in infos
                                       if family in (socket.AF_INET, socket.AF_INET6) and isinstance(sockaddr[0], str)))
            if not found:
                raise OutboundError("the URL's host name does not resolve")
        for _, sockaddr in found:
            kind = self.refuses(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
            if kind is not None:
                verb = "is" if literal is not None else "resolves to"
                raise AddressRefused(f"refused before connecting: the URL's host {verb} {kind}, which is reached "
                                     f"only when allow-listed ({self.where})")
        return found


def _pinned(addresses: list[tuple[int, SocketAddress]]) -> Any:
    """A stand-in for ``socket.create_connection`` that connects to the checked addresses only (in order, the
    first that answers), whatever address http.client asks for: it never resolves a name again."""

    def connect(_address: Any, timeout: Any = None, source_address: Any = None) -> socket.socket:
        error: OSError | None = None
        for family, sockaddr in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                if timeout is not None:
                    sock.settimeout(timeout)
                sock.connect(sockaddr)
                return sock
            except OSError as exc:
                sock.close()
                error = exc
        raise error or OSError("no address to connect to")

    return connect


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
            read_at_most: int = 64 * 1024, guard: AddressGuard | None = None) -> tuple[int, bytes]:
    """``(status, the first read_at_most bytes of the answer)`` of one request to an http(s) ``url``; with a
    ``guard``, only to an address it allows (the module docstring), else :class:`AddressRefused`."""
    problem = url_problem(url)
    if problem is not None:
        raise OutboundError(problem)
    parts = urlsplit(url)
    host = parts.hostname or ""  # url_problem made sure there is one
    addresses = None
    if guard is not None:  # resolved and checked once, here, before any socket exists
        addresses = guard.resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, parts.port, timeout=timeout, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    if addresses is not None:  # connect to exactly those; Host and TLS (SNI, the certificate) keep the URL's name
        conn._create_connection = _pinned(addresses)  # type: ignore[attr-defined]
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
