"""The catalogue of common mistakes: friendly messages and hints for syntax errors.

When the parser rejects a text, :func:`syntax_error` asks :func:`_diagnose` for a known
cause (``=`` for ``==``, ``&&``, an unclosed bracket, Python's ``None``, a method call...)
found by rescanning the text with a small tokenizer; :data:`CATALOGUE` lists one malformed
input per known cause with the hint it gets, and is itself tested. Otherwise the error says
what the parser expected. The words shared with the compiler's own hints live here too.
"""

from __future__ import annotations

import re
from collections import namedtuple
from collections.abc import Iterable
from typing import Any

from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedInput

from sealflow.dsl.expressions.errors import ExpressionError
from sealflow.dsl.expressions.functions import FUNCTIONS
from sealflow.dsl.expressions.parser import parser

KEYWORDS = ("and", "or", "not", "in", "null", "true", "false")
PYTHON_WORDS = {"None": "null", "NULL": "null", "nil": "null", "True": "true", "False": "false"}
TERNARY = ("if", "else", "elif")
TERNARY_HINT = ("expressions have no if/else: branch with a switch step, or use "
                 "default(x, fallback) for a fallback value")


def closest(word: str, choices: Any) -> str | None:
    """The choice that ``word`` most likely misspells, if any."""
    import difflib  # only on the error path: keeps it out of the start-up

    found = difflib.get_close_matches(word, list(choices), n=1)
    return found[0] if found else None


# ---------------------------------------------------------------- diagnosis

_Tok = namedtuple("_Tok", "kind value start end")
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<quote>['"])
  | (?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\$\{\{|===|!==|==|!=|<=|>=|&&|\|\||[-+*/%<>=!()\[\]{},.:$&|])
  | (?P<other>.)
""", re.X | re.S)
OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {")": "(", "]": "[", "}": "{"}
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=", "in")
_LEXICAL = {
    "=": ("'=' is not an operator", "use == to compare: input.x == 'a'"),
    "===": ("'===' is not an operator", "use == (values of different types are never equal)"),
    "!==": ("'!==' is not an operator", "use != to test for difference"),
    "&&": ("'&&' is not an operator", "use 'and': a and b"),
    "&": ("'&' is not an operator", "use 'and': a and b"),
    "||": ("'||' is not an operator", "use 'or': a or b"),
    "|": ("'|' is not an operator", "use 'or': a or b"),
    "!": ("'!' is not an operator", "use 'not': not input.done ('!=' is fine)"),
    "$": ("'$' is not part of an expression",
          "refer to data without '$': input.x, steps.<id>.output, run.id"),
    "${{": ("'${{' inside a bare expression",
            "this field takes a bare expression: write input.x, not ${{ input.x }}"),
}

#: Known malformed inputs and the hint each one gets (all X301); tested one by one.
CATALOGUE: list[tuple[str, str]] = [
    ("input.x = 'a'", "use =="),
    ("input.a && input.b", "use 'and'"),
    ("input.a & input.b", "use 'and'"),
    ("input.a || input.b", "use 'or'"),
    ("!input.done", "use 'not'"),
    ("input.x === 'a'", "use =="),
    ("input.x !== 'a'", "use !="),
    ("input.name == 'abc", "close it with a matching '"),
    ('input.name == "abc', 'close it with a matching "'),
    ("len(input.items", "close it with ')'"),
    ("input.items[0 == 1", "close it with ']'"),
    ("{'a': 1", "close it with '}'"),
    ("(input.a or input.b))", "remove it"),
    ("[1, 2)", "close '[' with ']'"),
    ("input.x == None", "write null"),
    ("input.flag == True", "write true"),
    ("input.flag == False", "write false"),
    ("'a' if input.vip else 'b'", "no if/else"),
    ("if input.vip", "no if/else"),
    ("input.a elif input.b", "no if/else"),
    ("input.name.lower()", "lower(x), not x.lower()"),
    ("input.tags.contains('a')", "contains(x"),
    ("$input.x", "without '$'"),
    ("${{ input.x }}", "bare expression"),
    ("{lead: input.x}", "map keys are quoted"),
    ("input.x == not input.y", "(not b)"),
    ("1 < input.n < 10", "a < b and b < c"),
    ("input.a == 1 == true", "a < b and b < c"),
    ("", "write an expression"),
]


def scan(text: str) -> list[_Tok]:
    """A rough tokenisation of ``text`` (kind, value, start, end) for diagnosing syntax errors."""
    return [_Tok(m.lastgroup, m.group(), m.start(), m.end())
            for m in _TOKEN.finditer(text) if m.lastgroup != "ws"]



def _chained(toks: list[_Tok], i: int) -> bool:
    depth = 0
    for tok in reversed(toks[:i]):
        if tok.value in CLOSERS:
            depth += 1
        elif tok.value in OPENERS:
            if depth == 0:
                return False
            depth -= 1
        elif depth == 0 and tok.value in ("and", "or", "not", ",", ":"):
            return False
        elif depth == 0 and tok.value in _COMPARISONS:
            return True
    return False


def _diagnose(text: str, pos: int, at_end: bool) -> tuple[int, str, str] | None:
    """A friendly (offset, message, hint) for a syntax error the parser found at ``pos``."""
    toks = scan(text)
    if not toks:
        return 0, "empty expression", "write an expression, e.g. input.x == 'a'"
    i = next((n for n, t in enumerate(toks) if t.start <= pos < t.end), None)
    if i is not None:
        here = toks[i]
        if here.kind == "quote":
            return here.start, "unterminated string", (
                f"close it with a matching {here.value}; write \\{here.value} for a quote inside it")
        if here.kind == "op" and here.value in _LEXICAL:
            return (here.start, *_LEXICAL[here.value])
        if here.value == "(" and i >= 2 and toks[i - 1].kind == "name" and toks[i - 2].value == ".":
            name = toks[i - 1].value
            if name not in FUNCTIONS:
                return toks[i - 1].start, f"method calls are not supported: .{name}()", (
                    "there are no methods; call a function with the value as an argument: "
                    + ", ".join(FUNCTIONS))
            call = f"{name}(x, ...)" if FUNCTIONS[name][1] > 1 else f"{name}(x)"
            return toks[i - 1].start, f"method calls are not supported: .{name}()", (
                f"call functions with the value as an argument: {call}, not x.{name}()")
        if here.kind == "name" and here.value in TERNARY:
            return here.start, f"'{here.value}' is not part of the language", TERNARY_HINT
        if here.kind == "name" and i > 0 and toks[i - 1].value in ("{", ",") \
                and i + 1 < len(toks) and toks[i + 1].value == ":":
            return here.start, "map keys are quoted strings", (
                f"map keys are quoted strings: {{'{here.value}': ...}}")
        if here.kind == "name" and i >= 2 and toks[i - 1].value in KEYWORDS and toks[i - 2].value != ".":
            word = toks[i - 1]
            return word.start, f"'{word.value}' cannot appear here", (
                "wrap it in parentheses: a == (not b)" if word.value == "not"
                else "a value or an operator is missing next to it")
        if here.value in _COMPARISONS and _chained(toks, i):
            return here.start, "comparisons do not chain", "write a < b and b < c"
    stack: list[_Tok] = []
    for tok in toks:
        if tok.start > pos:
            break
        if tok.kind != "op":
            continue
        if tok.value in OPENERS:
            stack.append(tok)
        elif tok.value in CLOSERS:
            if stack and stack[-1].value == CLOSERS[tok.value]:
                stack.pop()
            elif stack:
                opener = stack[-1]
                return tok.start, f"'{tok.value}' does not close '{opener.value}' (character " \
                    f"{opener.start + 1})", f"close '{opener.value}' with '{OPENERS[opener.value]}'"
            else:
                return tok.start, f"unmatched '{tok.value}'", "remove it, or add the bracket it closes"
    if at_end and stack:
        opener = stack[-1]
        return opener.start, f"unclosed '{opener.value}'", f"close it with '{OPENERS[opener.value]}'"
    for n, tok in enumerate(toks):
        if tok.start > pos:
            break
        if tok.kind == "name" and (n == 0 or toks[n - 1].value != "."):
            if tok.value in PYTHON_WORDS:
                written = PYTHON_WORDS[tok.value]
                return tok.start, f"'{tok.value}' is not a value here", f"write {written} (lowercase), not {tok.value}"
            if tok.value in TERNARY:
                return tok.start, f"'{tok.value}' is not part of the language", TERNARY_HINT
    return None


_TERMINAL_WORDS = {"NAME": "a name", "INT": "a number", "FLOAT": "a number", "STRING": "a string",
                   "$END": "the end of the expression", "_OR": "'or'", "_AND": "'and'", "NOT": "'not'",
                   "IN": "'in'", "NULL": "'null'", "TRUE": "'true'", "FALSE": "'false'"}


def _expected(names: Any) -> str:
    names = set(names or ())
    if {"NAME", "STRING"} <= names:
        return "expected a value: a name, number, string, list, map, null, true, false, '(' or '-'"
    if names == {"NAME"}:
        return "expected a field name (letters, digits, _); write x['other-key'] for any other key"
    words = set()
    for name in names:
        if name in _TERMINAL_WORDS:
            words.add(_TERMINAL_WORDS[name])
            continue
        try:
            pattern = parser().get_terminal(name).pattern
        except (KeyError, AttributeError):
            continue
        words.add(repr(pattern.value) if pattern.type == "str" else name.lower())
    if len(words) > 6:
        return "expected an operator (==, and, or, +, ...), a closing bracket or the end of the expression"
    return "expected " + ", ".join(sorted(words)) if words else "check the syntax"


def syntax_error(text: str, exc: UnexpectedInput) -> ExpressionError:
    """The :class:`ExpressionError` for Lark's syntax error: located, with a hint from :data:`CATALOGUE`."""
    expected: Iterable[str] | None
    if isinstance(exc, UnexpectedCharacters):
        pos, at_end = exc.pos_in_stream or 0, False  # the lexer always sets its position
        message, expected = f"unexpected character {text[pos]!r}", exc.allowed
    else:
        token: Token | None = getattr(exc, "token", None)
        if token is None or token.type == "$END":
            pos, at_end = len(text), True
            message = "unexpected end of the expression"
        else:
            pos, at_end = token.start_pos or 0, False  # the parser's tokens always carry their position
            if token.type in ("NAME", "INT", "FLOAT"):
                message = f"unexpected {_TERMINAL_WORDS[token.type][2:]} '{token}'"
            else:
                message = f"unexpected {token.value!r}"
        expected = getattr(exc, "expected", None)
    known = _diagnose(text, pos, at_end)
    if known:
        return ExpressionError("X301", known[1], known[0], known[2], text)
    return ExpressionError("X301", message, pos, _expected(expected), text)
