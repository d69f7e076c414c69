"""The LALR parser of ``grammar.lark``, loaded from generated tables while they are current.

Building the parser from the grammar (``Lark.open``) costs about 50 ms on every cold start.
``python -m tools.gen_grammar`` writes the built parser (``Lark.memo_serialize``) to
:mod:`sealflow.dsl.expressions.tables`, with the sha256 of the grammar and the Lark version it came from.
:func:`parser` loads those tables when both still match, and otherwise (someone edited the
grammar, or upgraded Lark) builds from the grammar, so nothing is ever stale at run time.

The tables are JSON text in a string constant: data only, read with :func:`json.loads`,
never a pickle (so no code runs on load) and cheap to compile where no bytecode is cached.
JSON has no integer keys: keys written with digits only are integers again on load (Lark's
own keys are names), and tuples come back as lists, which Lark reads the same way.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import lark
from lark import Lark
from lark.grammar import Rule
from lark.lexer import TerminalDef

GRAMMAR = Path(__file__).with_name("grammar.lark")


def grammar_sha256() -> str:
    """The sha256 of ``grammar.lark`` as it is on disk now."""
    return hashlib.sha256(GRAMMAR.read_bytes()).hexdigest()


def build() -> Lark:
    """The parser built from the grammar: always current, and slow."""
    return Lark.open("grammar.lark", rel_to=__file__, parser="lalr", propagate_positions=True)


def encode(built: Lark) -> Any:
    """The serialisable tables of ``built``: ``{"data": ..., "memo": ...}`` as plain JSON values."""
    data, memo = built.memo_serialize([TerminalDef, Rule])
    return json.loads(json.dumps({"data": data, "memo": memo}), object_pairs_hook=_int_keys)


def decode(text: str) -> Any:
    """The tables from their JSON text."""
    return json.loads(text, object_pairs_hook=_int_keys)


def load(tables: Any) -> Lark:
    """A parser from tables, as :func:`build` makes it (LALR, positions propagated)."""
    # (Lark does not annotate its loader from tables)
    loaded: Lark = Lark._load_from_dict(  # type: ignore[no-untyped-call]
        tables["data"], tables["memo"], propagate_positions=True)
    return loaded


def _int_keys(pairs: list[tuple[str, Any]]) -> dict[str | int, Any]:
    return {int(key) if key.isdigit() else key: value for key, value in pairs}


def current_tables() -> str | None:
    """The JSON text of :mod:`sealflow.dsl.expressions.tables` if it was made from this grammar and this Lark."""
    try:
        from sealflow.dsl.expressions import tables
    except ImportError:
        return None
    if grammar_sha256() != tables.GRAMMAR_SHA256 or lark.__version__ != tables.LARK_VERSION:
        return None
    return tables.TABLES


@functools.cache
def parser() -> Lark:
    """The parser: from the generated tables while they are current, else from the grammar."""
    text = current_tables()
    return build() if text is None else load(decode(text))
