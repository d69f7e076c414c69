"""What a process prints, with the secrets it knows blanked out: ``sys.stdout`` and ``sys.stderr`` behind a
redacting wrapper.

A process that runs actions arms the guard (:func:`arm`: ``sealflow run`` and every command that drives runs,
``sealflow worker``; a forked child of an isolated attempt inherits it). Nothing is wrapped until the process
knows a secret (:data:`~sealflow.core.redaction.REDACTOR` remembers every value a secret provider
resolves: what actions get in ``ctx.secrets``, a model's ``api_key``), so a process that never resolves one
writes exactly as before, at no cost per write. From the first secret on, ``sys.stdout`` and ``sys.stderr`` are
a :class:`RedactingStream`: every ``write`` (``print``, a traceback, ``warnings``, a logging handler that looks
the stream up as it writes) has each known secret, in every form :func:`~sealflow.core.redaction.forms`
lists, replaced by ``[redacted:<name>]`` before it reaches the real stream. Log records are redacted where they
are made (:func:`~sealflow.core.redaction.install_log_filter`), so a handler holding the real stream
writes redacted records too.

**Partial writes.** A secret may reach the stream in pieces (``print(a, end="")`` then ``print(b)``, a library
writing in chunks). The wrapper holds back the end of what was written for as long as it could be the beginning
of a secret (the longest end that is the start of a form of one, never a whole one), and writes it with the next
write, redacted if the two make a secret. Nothing else waits: text goes out as it is written, line or not.
``flush()`` flushes what was written, not what is held (it might be half a secret); what is held is written when
the guard is lifted (:func:`arm`'s return), before an isolated child exits, and at interpreter exit.

**Out of reach.** Only writes through the ``sys.stdout`` and ``sys.stderr`` objects pass here: not a write to
file descriptor 1 or 2 (``os.write``, C code, ``sys.__stdout__``, ``sys.stdout.buffer``), not the output of a
subprocess the action starts (it inherits the descriptors), not files it writes or what it sends over the
network, and not a secret transformed other than in the forms listed (hex, part of a value, a larger base64
blob, encryption): docs/security.md says so to action authors.
"""

from __future__ import annotations

import atexit
import sys
import threading
from collections.abc import Callable
from typing import Any

from sealflow.core.redaction import REDACTOR, Redactor

_STREAMS = ("stdout", "stderr")


class RedactingStream:
    """A text stream that writes to ``raw`` with every secret ``redactor`` knows blanked out; any other attribute
    is ``raw``'s (``encoding``, ``fileno``, ``isatty``, ``buffer``...)."""

    def __init__(self, raw: Any, redactor: Redactor = REDACTOR):
        self.raw = raw
        self._red = redactor
        self._held = ""
        self._lock = threading.RLock()
        self._forms: list[str] = []
        self._forms_of: object = None

    def write(self, text: str) -> int:
        red = self._red
        if (not red.active and not self._held) or not isinstance(text, str):  # (not text: the real stream says so)
            written: int = self.raw.write(text)
            return written
        with self._lock:
            out = red.text(self._held + text) or ""
            keep = self._pending(out)
            self._held = out[len(out) - keep:] if keep else ""
            if keep:
                out = out[:len(out) - keep]
            if out:
                self.raw.write(out)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.raw.flush()

    def release(self) -> None:
        """Write what is held back, then flush (the end of the output: nothing more can complete it)."""
        with self._lock:
            held, self._held = self._held, ""
            if held:
                self.raw.write(held)
        self.raw.flush()

    def forget_held(self) -> None:
        """In a forked child: what the parent held back is the parent's to write."""
        self._held = ""

    def _pending(self, text: str) -> int:
        """How many characters at the end of ``text`` could be the start of a secret's form (0: none)."""
        pattern = self._red._pattern
        if pattern is not self._forms_of:
            self._forms, self._forms_of = self._red.forms(), pattern
        n, best = len(text), 0
        for form in self._forms:
            i = text.find(form[0], max(0, n - len(form) + 1))
            while i != -1 and n - i > best:
                if form.startswith(text[i:]):
                    best = n - i
                    break
                i = text.find(form[0], i + 1)
        return best

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


_LOCK = threading.Lock()
_state: dict[str, Any] = {"armed": 0, "atexit": False}
#: the wrappers installed now: stream name -> wrapper
_installed: dict[str, RedactingStream] = {}


def arm() -> Callable[[], None]:
    """Guard this process's ``sys.stdout`` and ``sys.stderr`` from now on (wrapped once a secret is known, at
    once if one is); returns the function that lifts the guard again (idempotent; the streams are put back when
    the last guard is lifted, after writing what they held back)."""
    with _LOCK:
        _state["armed"] += 1
        if _activate not in REDACTOR.listeners:
            REDACTOR.listeners.append(_activate)
    if REDACTOR.active:
        _activate()
    lifted: list[bool] = []

    def lift() -> None:
        with _LOCK:
            if lifted:
                return
            lifted.append(True)
            _state["armed"] -= 1
            if _state["armed"] > 0:
                return
            for name, wrapper in list(_installed.items()):
                del _installed[name]
                if getattr(sys, name, None) is wrapper:
                    setattr(sys, name, wrapper.raw)
                wrapper.release()

    return lift


def _activate() -> None:
    """A secret is known (:attr:`Redactor.listeners`): wrap the streams, when armed."""
    with _LOCK:
        if not _state["armed"]:
            return
        for name in _STREAMS:
            stream = getattr(sys, name, None)
            if stream is None or isinstance(stream, RedactingStream):
                continue
            wrapper = RedactingStream(stream)
            _installed[name] = wrapper
            setattr(sys, name, wrapper)
        if not _state["atexit"]:
            _state["atexit"] = True
            atexit.register(release_all)


def release_all() -> None:
    """Write what every wrapper holds back and flush the streams (before an isolated child's ``os._exit``, and at
    interpreter exit)."""
    for wrapper in list(_installed.values()):
        try:
            wrapper.release()
        except (OSError, ValueError):  # a closed stream: nothing more can be written to it
            pass


def forked_child() -> None:
    """In a child just forked: forget what the parent's wrappers held back (the parent writes it)."""
    for wrapper in list(_installed.values()):
        wrapper.forget_held()
