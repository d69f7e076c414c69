"""Compact JSON as the store records it (outputs, results, ledger entries), and text a store can hold.

A Python string may hold what no store can write: an unpaired surrogate (``"\\ud800"``, which ``json.loads``
gives for such an escape, as a model's or a web service's answer may hold) is not Unicode and has no UTF-8
form; a NUL character has no place in a PostgreSQL text column. :func:`dumps` refuses the first with a
clear error naming where it is (an output or an input is refused at the boundary, not written half); a
record of what happened (an audit event's detail, an error message) is kept instead: :func:`dumps_record`
escapes it, :func:`clean_text` replaces what cannot be stored.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

#: what replaces a character a store cannot hold in plain text (U+FFFD REPLACEMENT CHARACTER)
REPLACEMENT = "\ufffd"
#: the key of what a record holds instead of a value it could not be written with
UNRECORDED = "unrecorded"
#: the most a run's input, a step's output or a run's output may weigh as stored JSON (UTF-8), unless the
#: runtime configuration's ``payloads.max_bytes`` says otherwise
DEFAULT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
#: an error message is kept to this many characters (an exception's text may be a whole response body)
MAX_MESSAGE_CHARS = 4096
#: a person's comment or reason (an approval's, a rejection's, a cancel's) is at most this many characters
MAX_REASON_CHARS = 2000


class NotUnicode(ValueError):
    """A value holds text that is not Unicode (an unpaired surrogate); ``where`` is its path (``$.a[2]``)."""

    def __init__(self, where: str):
        super().__init__(f"text at {where} is not valid Unicode (it holds an unpaired surrogate, as an escape "
                         "like \\ud800 that is half of a pair decodes to); no store can hold it")
        self.where = where


def dumps(value: Any) -> str:
    """Compact JSON text of ``value``; ``TypeError``/``ValueError`` when it is not JSON (NaN included, and a
    value nested past the interpreter's recursion limit), :class:`NotUnicode` when it holds text that is not
    Unicode."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise ValueError("it nests too deeply: lists or maps inside each other about a thousand times") from None
    if not text.isascii() and not _unicode(text):
        raise NotUnicode(unpaired_surrogate(value) or "$")
    return text


def dumps_or_none(value: Any) -> str | None:
    """Like :func:`dumps`, None for a value that is not JSON."""
    try:
        return dumps(value)
    except (TypeError, ValueError):
        return None


def dumps_record(value: Any) -> str:
    """Compact JSON text of a record the store keeps whatever it holds (an audit event's detail, an attempt's
    data): text that is not Unicode is written as its ``\\u`` escapes (the same value when read back); a
    value nested past the recursion limit as ``{"unrecorded": why}``."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:  # the record is kept, saying what could not be (never a commit lost with it)
        return json.dumps({UNRECORDED: "nested too deeply to record (about a thousand levels)"})
    if not text.isascii() and not _unicode(text):
        return json.dumps(value, separators=(",", ":"))
    return text


def utf8_size(text: str) -> int:
    """The bytes of ``text`` in UTF-8 (what a store writes)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def too_large(text: str, limit: int) -> int | None:
    """The UTF-8 size of ``text`` when it is over ``limit`` bytes, else None (cheap when clearly under)."""
    if len(text) * 4 <= limit:
        return None
    size = utf8_size(text)
    return size if size > limit else None


def input_hash(value: Any) -> str:
    """The hash idempotent submit compares (and a called run records): sha256 of the input's canonical JSON."""
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"),
                                                 ensure_ascii=False).encode()).hexdigest()


def over_payload_limit(text: str, limit: int) -> str | None:
    """What is wrong with stored JSON ``text`` when it weighs more than ``limit`` bytes (``payloads.max_bytes``),
    said the same way wherever a payload is refused; None when it does not."""
    size = too_large(text, limit)
    if size is None:
        return None
    return f"{size} bytes of JSON, over the limit of {limit} bytes (payloads.max_bytes in the runtime configuration)"


def short_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to about ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters not kept)"


def clean_text(text: str) -> str:
    """``text`` with what no store can hold in plain text (NUL, unpaired surrogates) replaced by U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    if text.isascii() or _unicode(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # pair what pairs, replace the rest


def unpaired_surrogate(value: Any, path: str = "$") -> str | None:
    """The path (``$.a[2]``) of a string (a key or a value) in ``value`` that is not Unicode, None if none
    (walked without recursion, each list or map once)."""
    todo: list[tuple[Any, str]] = [(value, path)]
    seen: set[int] = set()
    while todo:
        v, at = todo.pop()
        if isinstance(v, str):
            if not _unicode(v):
                return at
        elif isinstance(v, (dict, list, tuple)):
            if id(v) in seen:
                continue
            seen.add(id(v))
            if isinstance(v, dict):
                for k in v:
                    if isinstance(k, str) and not _unicode(k):
                        return f"{at} (a key)"
                todo.extend((x, f"{at}.{k}") for k, x in reversed(list(v.items())))
            else:
                todo.extend((x, f"{at}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


def _unicode(text: str) -> bool:
    try:
        text.encode()
        return True
    except UnicodeEncodeError:
        return False
