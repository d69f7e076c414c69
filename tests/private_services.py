"""Private instances of the services, for tests that kill, restart or pause them: a ``redis-server`` and a
PostgreSQL cluster (``initdb``/``pg_ctl``) of their own, each on a free port of 127.0.0.1, never the shared
ones of the machine.

Missing binaries skip the test with the reason (``.ci/run`` turns skips into failures). PostgreSQL refuses
to run as root, so under root the cluster belongs to the ``postgres`` user.

Either can run inside a network namespace of the test's own (``netns=``, ``listen=`` its addresses there:
tests/chaos/hosts.py); the test then reaches it through its unix socket (``socket_url``), with no network.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found is not None:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                      key=lambda p: [int(x) for x in p.split("/")[4].split(".") if x.isdigit()])
    return versions[-1] if versions else None


class PrivateRedis:
    """``redis-server --port PORT`` without persistence: a restart comes back empty, as a lost Redis would."""

    def __init__(self, workdir: Path, port: int | None = None, *, start: bool = True, netns: str | None = None,
                 listen: tuple[str, ...] = ("127.0.0.1",)):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.skip("no redis-server binary")
        self.dir, self.port = Path(workdir), port or free_port()
        self.netns, self.listen = netns, listen
        self.url = f"redis://{listen[0]}:{self.port}/0"
        self.socket = self.dir / f"redis-{self.port}.sock"
        self.socket_url = f"unix://{self.socket}?db=0"
        self.proc: subprocess.Popen | None = None
        if start:
            self.start()

    def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", *self.listen, "--save", "", "--appendonly", "no",
                "--dir", str(self.dir), "--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        if self.netns is not None:  # reachable only inside the test's own namespace: clients come from its hosts
            argv = ["ip", "netns", "exec", self.netns, *argv, "--protected-mode", "no"]  # (execs: redis's pid)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        client = redis.Redis(unix_socket_path=str(self.socket), socket_connect_timeout=1)
        for _ in range(200):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.kill()
        raise AssertionError(f"redis-server did not start on port {self.port} ({' '.join(self.listen)})")

    def kill(self) -> None:
        """SIGKILL: its queues are lost."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)
        self.proc = None

    close = kill


class PrivatePostgres:
    """A PostgreSQL cluster of its own (``initdb`` in a temporary folder, ``pg_ctl`` on a free port, trust auth,
    no unix socket outside its folder); ``url`` is its ``postgres`` database as user ``postgres``.
    ``fsync=off``: a server crash (``stop("immediate")``) keeps what was committed (the OS has it), only a
    machine crash would not, and no test crashes the machine."""

    def __init__(self, *, port: int | None = None, max_connections: int = 200, netns: str | None = None,
                 listen: tuple[str, ...] = ("127.0.0.1",)):
        self.initdb, self.pg_ctl = _binary("initdb"), _binary("pg_ctl")
        if self.initdb is None or self.pg_ctl is None:
            pytest.skip("no initdb/pg_ctl binaries (PostgreSQL server not installed)")
        self.as_user: dict = {}
        if os.geteuid() == 0:  # initdb and postgres refuse root
            try:
                import pwd

                owner = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and no 'postgres' user to own a private PostgreSQL cluster")
            self.as_user = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
        self.port, self.max_connections = port or free_port(), max_connections
        self.netns, self.listen = netns, listen
        self.dir = Path(tempfile.mkdtemp(prefix="sealflow-pg-"))
        if self.as_user:
            os.chown(self.dir, self.as_user["user"], self.as_user["group"])
        self.data, self.logfile = self.dir / "data", self.dir / "server.log"
        self.url = f"postgresql://postgres@{listen[0]}:{self.port}/postgres"
        self.socket_url = f"postgresql://postgres@/postgres?host={self.dir}&port={self.port}"
        self._run([self.initdb, "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync",
                   "--no-instructions"], "initdb")
        if netns is not None:  # trust the test's hosts too: each reaches one listen address's /24
            with open(self.data / "pg_hba.conf", "a") as hba:
                for address in listen:
                    hba.write(f"host all all {address.rsplit('.', 1)[0]}.0/24 trust\n")
        self.start()

    def _run(self, argv: list[str], what: str, timeout: float = 120, *, netns: bool = False) -> None:
        as_user = self.as_user
        if netns and self.netns is not None:  # enter the namespace as root, then become the cluster's owner
            drop = [f"--reuid={as_user['user']}", f"--regid={as_user['group']}", "--clear-groups"] if as_user else []
            argv = ["ip", "netns", "exec", self.netns, *(["setpriv", *drop] if drop else []), *argv]
            as_user = {}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self.dir, **as_user)
        if done.returncode != 0:
            log = self.logfile.read_text() if self.logfile.exists() else ""
            raise AssertionError(f"{what} failed ({done.returncode}): {done.stdout}{done.stderr}\n{log[-3000:]}")

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses={','.join(self.listen)} -c unix_socket_directories={self.dir} "
                   f"-c max_connections={self.max_connections} -c fsync=off -c full_page_writes=off")
        self._run([self.pg_ctl, "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60", "-o", options,
                   "start"], "pg_ctl start", netns=True)

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE``: ``fast`` (clients disconnected, a clean shutdown) or ``immediate`` (a crash:
        the next start recovers from the WAL)."""
        self._run([self.pg_ctl, "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"], "pg_ctl stop",
                  netns=True)

    def close(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Sends ``sig`` to ``proc`` and waits for it; a process still there after ``timeout`` s is killed."""
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_all(procs: dict) -> dict:
    """SIGTERM every process of ``procs`` (a name -> Popen map) at once, then wait for each (60 s, then killed);
    their exit codes by name (0: a clean stop)."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    codes = {}
    for name, proc in procs.items():
        try:
            codes[name] = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            codes[name] = proc.wait(timeout=30)
    return codes


def wait_http_ready(proc: subprocess.Popen, url: str, attempts: int = 300) -> None:
    """Polls ``url`` (a readiness endpoint of the server ``proc``) until it answers 200; fails with the server's
    errors if it exits first, or after ``attempts`` tries 0.1 s apart."""
    import httpx

    for _ in range(attempts):
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            pytest.fail(f"the server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        time.sleep(0.1)
    pytest.fail(f"the server was not ready at {url} after {attempts} tries")
