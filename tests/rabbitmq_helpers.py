"""RabbitMQ for the tests: the machine's server at 127.0.0.1:5672 (guest/guest), a fresh queue name per test,
and a private ``rabbitmq-server`` on a free port for tests that kill it.

Tests namespace RabbitMQ as they do Redis: every test uses its own ``--queue q_<uuid>`` and deletes only
that queue's queues afterwards (the queue of each priority, with Dramatiq's delay ``.DQ`` and dead-letter
``.XQ`` queues), so tests never see each other's messages and leave nothing behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/%2F"
SUFFIXES = ("", ".critical", ".high", ".low")
RABBITMQ_SERVER = shutil.which("rabbitmq-server", path="/usr/lib/rabbitmq/bin:" + os.environ.get("PATH", ""))


def rabbitmq_or_skip(url: str = RABBITMQ):
    """A pika connection to the machine's RabbitMQ, or skip (a failure under SEALFLOW_REQUIRE_SERVICES=1)."""
    try:
        import pika

        params = pika.URLParameters(url)
        params.socket_timeout = 2
        params.connection_attempts = 1
        return pika.BlockingConnection(params)
    except Exception:  # noqa: BLE001 - not installed, not running, refused: all mean "no RabbitMQ here"
        pytest.skip("RabbitMQ not reachable at 127.0.0.1:5672 (or pika not installed)")


def fresh_queue() -> str:
    return "q_" + uuid.uuid4().hex


def queue_names(queue: str) -> list[str]:
    """Every RabbitMQ queue a Sealflow ``--queue`` of this name may declare."""
    return [queue + p + s for p in SUFFIXES for s in ("", ".DQ", ".XQ")]


def delete_queues(connection, queue: str) -> None:
    """Delete ``queue``'s queues (only those) on ``connection``, then close it."""
    try:
        channel = connection.channel()
        for name in queue_names(queue):
            channel.queue_delete(name)  # deleting a queue that does not exist is no error
    finally:
        if connection.is_open:
            connection.close()


def message_count(url: str, queue: str) -> int:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return int(connection.channel().queue_declare(queue=queue, passive=True).method.message_count)
    finally:
        connection.close()


def _wait_bindable(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as sock:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the node's listener does
                sock.bind(("127.0.0.1", port))
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"port {port} is still in use {timeout:.0f} s after the node was "
                                         "killed") from None
                time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _DistPortTaken(Exception):
    """The node's distribution port was taken by another process before the node could bind it."""


class PrivateRabbit:
    """A ``rabbitmq-server`` of its own on a free port, with its data under ``base`` (kept across a
    :meth:`kill` and :meth:`start`, as a real node's disk is), and no plugins."""

    def __init__(self, base: Path):
        self.base, self.port, self.dist = base, free_port(), free_port()
        self.name = f"sf{uuid.uuid4().hex[:10]}@localhost"
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.proc: subprocess.Popen | None = None
        base.mkdir(parents=True, exist_ok=True)
        (base / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\nloopback_users = none\n")
        (base / "enabled_plugins").write_text("[].\n")

    def start(self, timeout: float = 60) -> None:
        """Start the node; a distribution port another process took between being picked and being bound
        (``dist_port_already_used``: the port was free when asked, a race with the rest of the machine) is
        picked again, up to three times."""
        for tries in range(3):
            try:
                return self._start(timeout)
            except _DistPortTaken:
                if tries == 2:
                    raise

    def _start(self, timeout: float) -> None:
        if RABBITMQ_SERVER is None:
            pytest.skip("no rabbitmq-server binary")
        # a restart after a kill: the node's distribution port is its own business, so it gets a fresh one
        # (the killed node's may still be held, which made the restart fail with eaddrinuse); the AMQP port
        # must stay (clients reconnect to the same URL): wait, bounded, until it can be bound again
        self.dist = free_port()
        _wait_bindable(self.port, timeout)
        said = len((self.base / "server.out").read_text()) if (self.base / "server.out").exists() else 0
        env = {**os.environ, "HOME": str(self.base), "RABBITMQ_NODENAME": self.name,
               "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_DIST_PORT": str(self.dist),
               "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"), "RABBITMQ_LOG_BASE": str(self.base / "log"),
               "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq.conf"),
               "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
               "RABBITMQ_PID_FILE": str(self.base / "pid")}
        with open(self.base / "server.out", "a") as out:
            self.proc = subprocess.Popen([RABBITMQ_SERVER], env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out = (self.base / "server.out").read_text()
                if "dist_port_already_used" in out[said:]:
                    raise _DistPortTaken(self.dist)
                raise AssertionError(f"rabbitmq-server exited: {out[-2000:]}")
            try:
                rabbitmq_or_skip(self.url).close()
                return
            except pytest.skip.Exception:
                time.sleep(0.2)
        self.kill()
        raise AssertionError(f"rabbitmq-server did not start in {timeout:.0f} s")

    def kill(self) -> None:
        """SIGKILL the node (its whole process group: the script, beam.smp and its helpers)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None
