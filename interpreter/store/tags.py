"""Run tags: ``name=value`` labels a submitter gives a run (``sealflow submit --tag``, ``POST /v1/runs`` ``tags``),
kept beside it and used to find it (``GET /v1/runs?tag=name=value``, ``sealflow runs list --tag``, the runs page).

They are the submitter's words about the run (a customer, a ticket, a batch), never read by the engine: written
once, in the transaction that creates the run (``NewRun.tags``; SQL: :mod:`sealflow.store.sql.tags`), and checked
before (:func:`check_tags`). Whoever may read a run may read its tags.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: the most tags a run may carry
MAX_TAGS = 16
#: the longest tag value, in characters
MAX_VALUE = 200
_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")


def check_tags(tags: Mapping[str, Any]) -> dict[str, str]:
    """``tags`` as stored (name -> text); ValueError saying what is wrong with them."""
    if not isinstance(tags, Mapping):
        raise ValueError("tags are a map of names to values")
    if len(tags) > MAX_TAGS:
        raise ValueError(f"{len(tags)} tags; a run carries at most {MAX_TAGS}")
    out: dict[str, str] = {}
    for name, value in tags.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"tag name {str(name)[:70]!r} is not a name (lower case letters, digits, '_', '.', '-', "
                             "starting with a letter, at most 63)")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"tag {name!r}: its value is text (or a number), not {type(value).__name__}")
        text = str(value)
        if not text or len(text) > MAX_VALUE or not text.isprintable():
            raise ValueError(f"tag {name!r}: its value is 1 to {MAX_VALUE} printable characters")
        out[name] = text
    return out


def parse_tag(text: str) -> tuple[str, str]:
    """``name=value`` (a command-line option, a query parameter) as (name, value); ValueError if it is not one."""
    name, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"{text[:80]!r} is not NAME=VALUE")
    check_tags({name: value})
    return name, value
