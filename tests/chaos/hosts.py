"""Many hosts on one machine, for the chaos suite: Linux network namespaces of the test's own, linked by veth pairs.

One *services* namespace holds the test's private PostgreSQL, Redis and effect receiver; each worker runs in a
*host* namespace of its own, joined to the services namespace by three point-to-point links, one per service:

    host i  db  10.1.i.2/24 <-> db<i>  10.1.i.1/24   PostgreSQL listens on the 10.1.*.1 addresses only
            mq  10.2.i.2/24 <-> mq<i>  10.2.i.1/24   Redis binds the 10.2.*.1 addresses only
            fx  10.3.i.2/24 <-> fx<i>  10.3.i.1/24   the effect receiver (never cut)

A host namespace has no other interface but its loopback and no default route, and the services namespace does
not forward (``ip_forward`` is 0 in a new namespace), so a worker can reach nothing but these three services,
and no packet of the test ever leaves its namespaces: the host's own network, its shared Redis, RabbitMQ and
PostgreSQL, are never touched. The test itself reaches PostgreSQL and Redis through their unix sockets (files,
no network), and the receiver is a thread of the test bound inside the services namespace.

**A partition** takes the services side of a link down (``ip link set db<i> down`` in the services namespace):
the worker's side keeps its address and route, loses its carrier, and what it sends is dropped in silence, as
by a cut cable between two switches (connections hang and retransmit; nothing is refused). Healing brings it up
again, and TCP's next retransmission gets through.

Names are unique per test run (``sf<8 hex>-svc``, ``sf<8 hex>-h<i>``); :meth:`Hosts.close` kills every process
left in the namespaces (the test started them all: the namespaces are its own) and deletes them, which deletes
their veths. Needs root and iproute2's ``ip``; :func:`netns_or_skip` says clearly what is missing (a skip,
which ``SEALFLOW_REQUIRE_SERVICES=1`` turns into a failure).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

LINKS = {"db": 1, "mq": 2, "fx": 3}
#: setns(2)'s flag for a network namespace
CLONE_NEWNET = 0x40000000


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise AssertionError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def netns_or_skip() -> None:
    """Skip (a failure under SEALFLOW_REQUIRE_SERVICES=1) with the reason, unless this process can create a
    network namespace and a veth pair in it: root, iproute2's ``ip``, a kernel with network namespaces."""
    if shutil.which("ip") is None:
        pytest.skip("the hosts chaos variant needs iproute2's ip (apt-get install iproute2)")
    if os.geteuid() != 0:
        pytest.skip("the hosts chaos variant creates network namespaces (ip netns add): it must run as root")
    probe = f"sf{uuid.uuid4().hex[:8]}-probe"
    added = _ip("netns", "add", probe, check=False)
    if added.returncode != 0:
        pytest.skip(f"ip netns add does not work here ({added.stderr.strip()}): no network namespaces for the "
                    "hosts chaos variant")
    try:
        veth = _ip("-n", probe, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb", check=False)
        if veth.returncode != 0:
            pytest.skip(f"no veth pairs in a network namespace here ({veth.stderr.strip()})")
    finally:
        _ip("netns", "del", probe, check=False)


class Hosts:
    """The services namespace and ``count`` host namespaces, linked (see the module's docstring)."""

    def __init__(self, count: int):
        self.tag = f"sf{uuid.uuid4().hex[:8]}"
        self.services = f"{self.tag}-svc"
        self.hosts = [f"{self.tag}-h{i}" for i in range(count)]
        self.cut_links: set[tuple[int, str]] = set()
        self.created: list[str] = []
        try:
            for name in (self.services, *self.hosts):
                _ip("netns", "add", name)
                self.created.append(name)
                _ip("-n", name, "link", "set", "lo", "up")
            for i, host in enumerate(self.hosts):
                for link, k in LINKS.items():
                    _ip("-n", self.services, "link", "add", "name", f"{link}{i}", "type", "veth", "peer", "name", link,
                        "netns", host)
                    _ip("-n", self.services, "addr", "add", f"10.{k}.{i}.1/24", "dev", f"{link}{i}")
                    _ip("-n", host, "addr", "add", f"10.{k}.{i}.2/24", "dev", link)
                    _ip("-n", self.services, "link", "set", f"{link}{i}", "up")
                    _ip("-n", host, "link", "set", link, "up")
        except BaseException:
            self.close()
            raise

    def address(self, i: int, link: str) -> str:
        """The services' address host ``i`` reaches over ``link`` (db, mq or fx)."""
        return f"10.{LINKS[link]}.{i}.1"

    def addresses(self, link: str) -> list[str]:
        """The services' side of ``link`` for every host: what a service of that link listens on."""
        return [self.address(i, link) for i in range(len(self.hosts))]

    def exec_argv(self, namespace: str, argv: list[str]) -> list[str]:
        """``argv`` run in ``namespace`` (``ip netns exec`` execs it: the process's pid is the command's)."""
        return ["ip", "netns", "exec", namespace, *argv]

    def cut(self, i: int, link: str) -> None:
        """Partition host ``i`` from the service of ``link``: its packets are dropped until :meth:`heal`."""
        _ip("-n", self.services, "link", "set", f"{link}{i}", "down")
        self.cut_links.add((i, link))

    def heal(self, i: int, link: str) -> None:
        _ip("-n", self.services, "link", "set", f"{link}{i}", "up")
        self.cut_links.discard((i, link))

    def heal_all(self) -> None:
        for i, link in sorted(self.cut_links):
            self.heal(i, link)

    def inside(self, namespace: str, make: Callable[[], Any]) -> Any:
        """``make()`` called in a thread that entered ``namespace`` (setns(2)): a socket it opens (a server's)
        belongs to that namespace for good, while the rest of this process stays where it is."""
        got: dict[str, Any] = {}

        def enter() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {namespace}")
                finally:
                    os.close(fd)
                got["value"] = make()
            except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
                got["error"] = exc

        thread = threading.Thread(target=enter, name=f"in-{namespace}")
        thread.start()
        thread.join()
        if "error" in got:
            raise got["error"]
        return got["value"]

    def pids(self, namespace: str) -> list[int]:
        done = _ip("netns", "pids", namespace, check=False)
        return [int(p) for p in done.stdout.split() if p.isdigit()]

    def close(self) -> None:
        """Kill what still runs in the namespaces (all started by the test), then delete them and their veths."""
        for name in self.created:
            for pid in self.pids(name):
                if pid == os.getpid():  # (never the test: a thread of it may sit in a namespace, not the process)
                    continue
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while any(set(self.pids(name)) - {os.getpid()} for name in self.created) and time.monotonic() < deadline:
            time.sleep(0.1)
        for name in reversed(self.created):
            _ip("netns", "del", name, check=False)
        self.created = []
