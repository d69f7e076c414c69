"""service/outbound.py's address guard (issue 31): a guarded request (an approval notification) goes only to a
public address or one the operator allow-listed, checked after resolution and BEFORE any connection, and
connects to exactly the address it checked (no second resolution), keeping the URL's host name for the Host
header and for TLS.

No packet leaves 127.0.0.0/8 here: host names resolve through a fake resolver (never the real one), refused
addresses are proved refused by a guard on ``socket.socket.connect`` that records every connection attempted,
and the receivers that answer are loopback servers.

Given / When / Then in each test.
"""

from __future__ import annotations

import datetime as dt
import http.server
import ipaddress
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from webhook_receivers import Receiver, guard_connections

from sealflow.core.errors import ConfigError
from sealflow.operations import outbound
from sealflow.operations.notifications import load
from sealflow.operations.outbound import AddressGuard, AddressRefused, parse_networks
from sealflow.runtime.config import RuntimeConfig

LOOPBACK_ONLY = AddressGuard(parse_networks(["127.0.0.1/32"]), "notifications.allow_networks")


class Resolver:
    """A fake ``socket.getaddrinfo``: each name answers its scripted addresses in turn (the last one again and
    again); any other name does not resolve. Every question is kept."""

    def __init__(self, answers: dict[str, list[list[str]]]):
        self.answers = {name: [list(a) for a in script] for name, script in answers.items()}
        self.asked: list[str] = []

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        self.asked.append(host)
        script = self.answers.get(host)
        if not script:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        addresses = script.pop(0) if len(script) > 1 else script[0]
        out = []
        for text in addresses:
            ip = ipaddress.ip_address(text)
            if ip.version == 6:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (text, port, 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (text, port)))
        return out


@pytest.fixture
def connects(monkeypatch):
    """Every connection attempted, as (host, port); one outside 127.0.0.0/8 raises instead of connecting."""
    return guard_connections(monkeypatch)


def resolver(monkeypatch, answers: dict[str, list[list[str]]]) -> Resolver:
    fake = Resolver(answers)
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


#: address -> the kind the refusal names
REFUSED = {
    "127.0.0.1": "a loopback address", "127.8.9.10": "a loopback address", "::1": "a loopback address",
    "169.254.169.254": "a cloud metadata address", "169.254.170.2": "a cloud metadata address",
    "fd00:ec2::254": "a cloud metadata address", "192.0.0.192": "a cloud metadata address",
    "168.63.129.16": "a cloud metadata address", "100.100.100.200": "a cloud metadata address",
    "169.254.1.1": "a link-local address", "fe80::1": "a link-local address",
    "10.0.0.1": "a private address", "172.16.5.4": "a private address", "192.168.1.1": "a private address",
    "fc00::1": "a private address", "fd12:3456::1": "a private address",
    "0.0.0.0": "an unspecified address", "::": "an unspecified address",
    "224.0.0.1": "a multicast address", "239.255.255.250": "a multicast address", "ff02::1": "a multicast address",
    "100.64.0.1": "an address that is not publicly routable",
    "::ffff:127.0.0.1": "a loopback address", "::ffff:169.254.169.254": "a cloud metadata address",
    "64:ff9b::a9fe:a9fe": "a cloud metadata address", "2002:a00:1::1": "a private address",
}


def literal_url(address: str) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}/latest/meta-data/iam/security-credentials"


@pytest.mark.parametrize("address", list(REFUSED))
def test_a_non_public_address_as_the_url_s_host_is_refused_before_any_connection(monkeypatch, connects, address):
    # Given a guard that allow-lists nothing, and no resolver to ask
    fake = resolver(monkeypatch, {})
    # When a URL whose host is that address is requested
    with pytest.raises(AddressRefused) as refused:
        outbound.request("POST", literal_url(address), body=b"{}", timeout=2.0, guard=AddressGuard())
    # Then it is refused naming the kind of address (never the URL), and nothing was resolved nor connected to
    assert f"the URL's host is {REFUSED[address]}" in str(refused.value)
    assert "meta-data" not in str(refused.value) and address not in str(refused.value)
    assert connects == [] and fake.asked == []


@pytest.mark.parametrize("address", ["169.254.169.254", "10.0.0.1", "::1", "fe80::1", "127.0.0.1"])
def test_a_host_name_that_resolves_to_a_non_public_address_is_refused_before_any_connection(monkeypatch, connects,
                                                                                           address):
    # Given a host name that resolves to that address
    fake = resolver(monkeypatch, {"hooks.example.com": [[address]]})
    # When it is requested through the guard
    with pytest.raises(AddressRefused) as refused:
        outbound.request("POST", "https://hooks.example.com/sealflow", body=b"{}", timeout=2.0, guard=AddressGuard())
    # Then it was resolved once, refused as what it resolves to, and never connected to
    assert f"the URL's host resolves to {REFUSED[address]}" in str(refused.value)
    assert fake.asked == ["hooks.example.com"] and connects == []


def test_a_name_with_one_public_and_one_private_address_is_refused_whole(monkeypatch, connects):
    # Given a name that resolves to a public address and to the metadata endpoint (a rebinding trick)
    resolver(monkeypatch, {"hooks.example.com": [["93.184.216.34", "169.254.169.254"]]})
    # When requested / Then it is refused, nothing connected
    with pytest.raises(AddressRefused, match="cloud metadata"):
        outbound.request("POST", "http://hooks.example.com/x", timeout=2.0, guard=AddressGuard())
    assert connects == []


def test_a_name_that_does_not_resolve_is_a_plain_outbound_error(monkeypatch, connects):
    resolver(monkeypatch, {})
    with pytest.raises(outbound.OutboundError, match="does not resolve") as err:
        outbound.request("POST", "http://nowhere.example.com/TOKEN", timeout=2.0, guard=AddressGuard())
    assert not isinstance(err.value, AddressRefused) and "TOKEN" not in str(err.value) and connects == []


def test_an_allow_listed_loopback_receiver_is_posted_to(connects):
    # Given a receiver on 127.0.0.1, and a guard that allow-lists exactly 127.0.0.1
    with Receiver() as receiver:
        url = receiver.script("/hook", [200])
        # When a request is made to it
        got = outbound.request("POST", url, body=b"{}", timeout=5.0, guard=LOOPBACK_ONLY)
        # Then it arrives
        assert got[0] == 200 and len(receiver.hits("/hook")) == 1
    # And an allow-list of another loopback address does not let it through
    other = AddressGuard(parse_networks(["127.0.0.2"]))
    with pytest.raises(AddressRefused, match="loopback"):
        outbound.request("POST", url, body=b"{}", timeout=5.0, guard=other)
    assert [a[0] for a in connects] == ["127.0.0.1"]


def test_the_connection_goes_to_the_address_checked_never_to_a_second_resolution(monkeypatch, connects):
    # Given a name that resolves first to the allow-listed loopback receiver, then to the metadata endpoint
    with Receiver() as receiver:
        port = receiver.server.server_address[1]
        fake = resolver(monkeypatch, {"hooks.test": [["127.0.0.1"], ["169.254.169.254"]]})
        # When a request is made to it by name
        got = outbound.request("POST", f"http://hooks.test:{port}/hook", body=b"{}", timeout=5.0,
                               guard=LOOPBACK_ONLY)
        # Then the name was resolved once, the one connection went to the address checked, and the receiver
        # saw the URL's host name in Host
        assert got[0] == 200 and fake.asked == ["hooks.test"] and connects == [("127.0.0.1", port)]
        ((_, headers, _),) = receiver.hits("/hook")
        assert headers["host"] == f"hooks.test:{port}"


def test_a_redirect_is_answered_as_it_is_and_its_location_never_reached(connects):
    # Given an allow-listed receiver that redirects
    with Receiver() as receiver:
        url = receiver.script("/moved", [302])
        # When requested / Then the 302 is the answer, and the only connection was the receiver's
        assert outbound.request("POST", url, timeout=5.0, guard=LOOPBACK_ONLY)[0] == 302
        assert receiver.hits("/elsewhere") == [] and len(connects) == 1


# -- TLS: the pinned address, the URL's name for SNI and the certificate ---------------------------------------

def _certificate(name: str, ca_key, ca_name, key) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    return (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(ca_key, hashes.SHA256()))


class TlsReceiver:
    """A loopback HTTPS server with a certificate for ``name`` from a test CA; it keeps the SNI it was sent."""

    def __init__(self, tmp_path, name: str):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sealflow test CA")])
        now = dt.datetime.now(dt.UTC)
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
              .not_valid_after(now + dt.timedelta(hours=1))
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .sign(ca_key, hashes.SHA256()))
        key = ec.generate_private_key(ec.SECP256R1())
        (tmp_path / "cert.pem").write_bytes(_certificate(name, ca_key, ca_name, key).public_bytes(
            serialization.Encoding.PEM))
        (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                             serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))
        self.ca_pem = ca.public_bytes(serialization.Encoding.PEM).decode()
        self.sni: list[str | None] = []
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
        server_context.sni_callback = lambda sock, server_name, ctx: self.sni.append(server_name)

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = server_context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_https_to_a_pinned_address_sends_and_verifies_the_url_s_host_name(monkeypatch, connects, tmp_path):
    # Given an HTTPS receiver on 127.0.0.1 with a certificate for hooks.test, a client that trusts its CA, and
    # hooks.test resolving to it (allow-listed)
    with TlsReceiver(tmp_path, "hooks.test") as tls:
        port = tls.server.server_address[1]
        real_context = ssl.create_default_context
        monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: real_context(cadata=tls.ca_pem))
        resolver(monkeypatch, {"hooks.test": [["127.0.0.1"]], "other.test": [["127.0.0.1"]]})
        # When a guarded request is made by name
        got = outbound.request("POST", f"https://hooks.test:{port}/hook", body=b"{}", timeout=5.0,
                               guard=LOOPBACK_ONLY)
        # Then it connected to the checked address, sent hooks.test as SNI and verified the certificate for it
        assert got[0] == 204 and tls.sni == ["hooks.test"] and connects == [("127.0.0.1", port)]
        # And a name the certificate is not for fails TLS though the address is the same
        with pytest.raises(outbound.OutboundError, match="TLS failed"):
            outbound.request("POST", f"https://other.test:{port}/hook", body=b"{}", timeout=5.0, guard=LOOPBACK_ONLY)


# -- the configuration: notifications.allow_networks ---------------------------------------------------------

def test_allow_networks_reads_networks_and_addresses_and_refuses_anything_else():
    # Given the section with an allow-list / Then its entries are networks, a bare address being one host
    got = load(RuntimeConfig.from_dict({"notifications": {"allow_networks": ["127.0.0.1", "10.20.0.0/16", "fd00::/8"],
                                                          "channels": {}}}))
    assert [str(n) for n in got.allow_networks] == ["127.0.0.1/32", "10.20.0.0/16", "fd00::/8"]
    assert got.guard.refuses(ipaddress.ip_address("10.20.3.4")) is None
    assert got.guard.refuses(ipaddress.ip_address("10.21.0.1")) == "a private address"
    # And no allow-list allows nothing but public addresses
    none = load(RuntimeConfig.from_dict({"notifications": {"channels": {}}}))
    assert none.allow_networks == () and none.guard.refuses(ipaddress.ip_address("127.0.0.1")) == "a loopback address"
    # And an entry that is no network is a ConfigError naming the key
    for bad in (["10.0.0.0/33"], ["intranet"], [8080], "10.0.0.0/8"):
        with pytest.raises(ConfigError, match=r"notifications\.allow_networks: "):
            load(RuntimeConfig.from_dict({"notifications": {"allow_networks": bad, "channels": {}}}))
