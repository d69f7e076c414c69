"""Temporary storage for one attempt: ``ctx.tempdir``.

Created on first use (an action that never touches ``ctx.tempdir`` costs
nothing) with :func:`tempfile.mkdtemp`: an unpredictable name, mode 0700,
under the configured root (``tempdir.root``, default the system temporary
directory). It is removed when the attempt ends, whatever the outcome:
the action's thread removes it as the action returns or raises, so an
attempt that timed out while its thread still runs keeps its directory until
that thread finally returns, then loses it.

A size limit (``tempdir.max_bytes``, default 100 MiB) holds per attempt. It is
measured when the attempt ends (before removal) and whenever the action asks
``ctx.tempdir_usage()``; over the limit the attempt fails with
``policy_denied`` (never retried). Symbolic links are counted as links, never
followed, and removal never follows them out of the directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from sealflow.core.errors import StepError

#: a run's temporary area holds at most this much unless tempdir.max_bytes says otherwise
DEFAULT_TEMPDIR_BYTES = 100 * 2**20


def tree_size(path: str) -> int:
    """Bytes used by the files under ``path`` (links counted as themselves, not followed)."""
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        entries = files + [d for d in dirs if os.path.islink(os.path.join(root, d))]
        for name in entries:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


class TempArea:
    """The temporary directory of one attempt (created lazily, removed by :meth:`close`)."""

    __slots__ = ("max_bytes", "root", "label", "_path", "_lock", "closed", "used_at_close")

    def __init__(self, max_bytes: int = DEFAULT_TEMPDIR_BYTES, root: str | None = None, label: Any = ""):
        self.max_bytes = max_bytes
        self.root = root
        self.label = label
        self._path: str | None = None
        self._lock = threading.Lock()
        self.closed = False
        #: bytes found when the attempt ended (None: the directory was never created)
        self.used_at_close: int | None = None

    @property
    def created(self) -> bool:
        return self._path is not None

    @property
    def path(self) -> str:
        with self._lock:
            if self.closed:
                raise StepError("internal", f"the temporary directory of {self._name()} was removed when the "
                                            "attempt ended; use ctx.tempdir only while the action runs")
            if self._path is None:
                if self.root:
                    os.makedirs(self.root, mode=0o700, exist_ok=True)
                path = tempfile.mkdtemp(prefix="sealflow-", dir=self.root)
                os.chmod(path, 0o700)  # mkdtemp already does; say it where it is checked
                self._path = path
            return self._path

    def usage(self) -> int:
        """Bytes used now; ``policy_denied`` when over the limit."""
        path = self._path
        used = 0 if path is None else tree_size(path)
        if used > self.max_bytes:
            raise StepError("policy_denied", self._over(used))
        return used

    def _name(self) -> str:
        label = self.label
        if isinstance(label, str):
            return label or "this attempt"
        return f"step {label.step_id!r} of run {label.run_id} (attempt {label.attempt})"  # a StepContext

    def _over(self, used: int) -> str:
        return (f"{self._name()} used {used} bytes of temporary storage, over the limit of "
                f"{self.max_bytes} bytes (tempdir.max_bytes in the runtime configuration)")

    def close(self) -> None:
        """Measure, then remove the directory (idempotent)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            path = self._path
        if path is None:
            return
        try:
            self.used_at_close = tree_size(path)
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def failure(self) -> str | None:
        """Why the attempt must fail for its temporary storage (None: within the limit)."""
        used = self.used_at_close
        return None if used is None or used <= self.max_bytes else self._over(used)

    def run(self, fn: Callable[[Any], Any], ctx: Any) -> Any:
        """``fn(ctx)``, then remove the directory whatever happened (runs on the attempt's thread)."""
        try:
            return fn(ctx)
        finally:
            self.close()


def area_for(config: Any, label: Any = "") -> TempArea:
    """A fresh area with the configured limit and root."""
    if config is None:
        return TempArea(label=label)
    return TempArea(config.tempdir_max_bytes, config.tempdir_root, label)
