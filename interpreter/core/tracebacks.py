"""An action's exception as the failed attempt keeps it: a bounded traceback, and where in the action it happened.

:func:`failure` classifies an exception (:func:`~sealflow.core.errors.classify`) and, unless the
action raised a classified :class:`~sealflow.core.errors.StepError` on purpose, adds:

* **the traceback**, as text: one line per frame, ``path:line in function``, then its source line when the
  file can be read; the exception's type and message last, as Python prints them, with its causes before it
  (``raise ... from``, or an exception raised while handling another). The frames of sealflow's own code that
  called the action (its runner thread, sandbox, wrappers) are left out: the traceback starts at the first
  frame outside sealflow (all of them are kept when there is none: a bug of sealflow itself). Bounded: at most
  :data:`MAX_FRAMES` frames and :data:`MAX_CHARS` characters, keeping the innermost and saying how much was cut;
  no local variable is ever included;
* **where**: the innermost frame of the user's code (not sealflow's, not the standard library's or an
  installed package's, unless nothing else is), ``actions/hello.py:12 in greet``, appended to the message of
  an ``internal`` failure (a bug: ``KeyError: 'missing' (actions/hello.py:12 in greet)``), so every one-line
  summary of it names the place; an exception classified by its type (``TimeoutError``, ``ConnectionError``,
  ``PermissionError``) keeps its message as it is, and its traceback.

Paths under the current directory are shown relative to it. Secrets are not removed here: the engine redacts
the stored trace with the attempt's message (:func:`sealflow.execution.secrets.redact_commit`).
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from types import FrameType, TracebackType

from sealflow.core.errors import StepError, classify
from sealflow.core.jsonc import MAX_MESSAGE_CHARS, short_message

#: the frames a trace keeps (the innermost ones), across the exception and its causes
MAX_FRAMES = 20
#: the characters a trace keeps (its end: the innermost frames and the exception)
MAX_CHARS = 16 * 1024
#: causes and contexts followed back from the exception
MAX_CHAIN = 4
#: the characters of one source line, and of one exception's message, kept in a trace
_LINE_CHARS = 240
_MESSAGE_CHARS = 2000

_CAUSE = "The above exception was the direct cause of the following exception:"
_CONTEXT = "During handling of the above exception, another exception occurred:"


@dataclasses.dataclass(frozen=True, slots=True)
class Frame:
    path: str  # as shown: relative to the current directory when under it
    file: str  # as the code object names it (to read its source line)
    line: int
    function: str
    own: bool  # sealflow's own code (its demo world's actions excepted: they are actions like any other)
    library: bool  # the standard library's, or an installed package's

    def where(self) -> str:
        return f"{self.path}:{self.line} in {self.function}"


@dataclasses.dataclass(frozen=True, slots=True)
class Trace:
    """``text``: the bounded traceback; ``where``: the innermost frame of the user's code (None: none)."""

    text: str
    where: str | None


def failure(exc: BaseException) -> tuple[str, str, float | None, str | None]:
    """``(error_class, message, retry_after, trace)`` of an exception an action raised: a classified
    :class:`StepError` as it is (no trace); anything else with its trace, an ``internal`` one's message naming
    where it happened."""
    error_class, message, retry_after = classify(exc)
    if isinstance(exc, StepError):
        return error_class, message, retry_after, None
    trace = capture(exc)
    if error_class == "internal" and trace.where is not None:  # (a long message is cut first: the location stays)
        suffix = f" ({trace.where})"
        message = short_message(message, max(200, MAX_MESSAGE_CHARS - len(suffix) - 64)) + suffix
    return error_class, message, retry_after, trace.text


def capture(exc: BaseException, *, max_frames: int = MAX_FRAMES, max_chars: int = MAX_CHARS) -> Trace:
    """The traceback of ``exc`` (with its causes), bounded, and where in the user's code it happened; never
    raises (a traceback that cannot be formatted says so: the failure is recorded anyway)."""
    try:
        return _capture(exc, max_frames, max_chars)
    except Exception as bad:  # noqa: BLE001 - e.g. an exception whose __str__ raises inside a cause
        return Trace(f"(the traceback could not be kept: {type(bad).__name__})", None)


def _capture(exc: BaseException, max_frames: int, max_chars: int) -> Trace:
    chain = _chain(exc)
    stacks = [_frames(e.__traceback__) for e, _ in chain]
    where = _where(stacks[-1])
    left = max_frames
    parts: list[str] = []
    for (e, link), frames in zip(reversed(chain), reversed(stacks), strict=True):  # the innermost budget first
        kept, left = frames[max(0, len(frames) - left):], max(0, left - len(frames))
        block = ["Traceback (most recent call last):"]
        if len(kept) < len(frames):
            block.append(f"  ... {len(frames) - len(kept)} outer frame(s) cut (at most {max_frames} are kept)")
        for f in kept:
            block.append(f"  {f.where()}")
            source = linecache.getline(f.file, f.line).strip()
            if source:
                block.append(f"    {_cut(source, _LINE_CHARS)}")
        block.append(_cut("".join(traceback.format_exception_only(type(e), e)).rstrip(), _MESSAGE_CHARS))
        if link:
            block += ["", link, ""]
        parts.insert(0, "\n".join(block))
    text = "\n".join(parts)
    if len(text) > max_chars:
        cut = len(text) - max_chars
        text = f"... {cut} character(s) cut from the start (at most {max_chars} are kept)\n" + text[cut:]
    return Trace(text, where)


def _chain(exc: BaseException) -> list[tuple[BaseException, str | None]]:
    """``exc`` and the exceptions it followed, outermost (earliest) first, each with the line that links it to
    the next one (None for ``exc``)."""
    out: list[tuple[BaseException, str | None]] = [(exc, None)]
    seen = {id(exc)}
    current = exc
    while len(out) < MAX_CHAIN:
        if current.__cause__ is not None:
            earlier, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            earlier, link = current.__context__, _CONTEXT
        else:
            break
        if id(earlier) in seen:
            break
        seen.add(id(earlier))
        out.insert(0, (earlier, link))
        current = earlier
    return out


def _frames(tb: TracebackType | None) -> list[Frame]:
    """The frames of ``tb``, outermost first, without sealflow's own frames that called the action."""
    frames = [_frame(frame, line) for frame, line in traceback.walk_tb(tb)]
    first = next((i for i, f in enumerate(frames) if not f.own), None)
    return frames if first is None else frames[first:]


def _frame(frame: FrameType, line: int | None) -> Frame:
    module = str(frame.f_globals.get("__name__") or "")
    own = (module == "sealflow" or module.startswith("sealflow.")) and not module.startswith("sealflow.demo")
    path = frame.f_code.co_filename
    return Frame(shown_path(path), path, line or 0, frame.f_code.co_name, own, _in_library(path))


def _where(frames: list[Frame]) -> str | None:
    """The innermost frame of the user's code: outside sealflow and the libraries, else outside sealflow."""
    choices: tuple[Callable[[Frame], bool], ...] = (lambda f: not f.own and not f.library, lambda f: not f.own)
    for wanted in choices:
        found = next((f for f in reversed(frames) if wanted(f)), None)
        if found is not None:
            return found.where()
    return None


def shown_path(path: str) -> str:
    """``path`` relative to the current directory when it is under it, else as it is."""
    try:
        here = os.getcwd()
        full = os.path.abspath(path)
        if os.path.commonpath([here, full]) == here:
            return os.path.relpath(full, here)
    except (OSError, ValueError):  # no current directory, another drive, a pseudo path like "<string>"
        pass
    return path


def _library_roots() -> tuple[str, ...]:
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    paths = sysconfig.get_paths()
    roots = {os.path.abspath(paths[n]) for n in names if paths.get(n)}
    roots |= {os.path.abspath(p) for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    return tuple(sorted(roots))


_LIBRARIES = _library_roots()


def _in_library(path: str) -> bool:
    if path.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return path.startswith("<frozen")
    full = os.path.abspath(path)
    return any(full.startswith(root + os.sep) for root in _LIBRARIES)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"
