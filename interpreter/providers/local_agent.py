"""The local model as an agent: deterministic tool use from the goal and the transcript.

When a request carries ``tools`` (or a ``transcript``), :class:`~.local.LocalModel` acts
as an agent. Same request, same answer: no randomness, no clock, no I/O.

**Which call next.** The tools are considered in the order given; each is proposed at most
once (a call that was refused or failed is not proposed again). A tool is proposed when
its arguments can be *grounded* in the goal or in earlier tool results:

* ``<noun>_id`` (a string): the first id-like token ``<abbr>_<tail>`` of the goal whose
  ``<abbr>`` abbreviates the noun (same first letter, a subsequence of it: ``tkt`` for
  ``ticket_id``, ``cus`` for ``customer_id``, ``ord`` for ``order_id``); else a string value
  under the same key in an earlier tool result;
* ``query``/``q``/``search``/``question``/``keywords``/``terms``/``topic``/``text`` (a string):
  up to 12 content words of the goal's labelled parts (``Subject:``, ``Body:``,
  ``Question:``, ``Description:``, ...; the whole goal when there are none), without
  stop words and id tokens;
* anything else is left out. A tool with a required argument it cannot ground, or with
  parameters none of which it can ground, is not called.

When no tool is left to call, the answer is the final output.

**The final answer** is an instance of ``output_schema`` (:func:`.synth.synthesize`), with
what the tools found where the schema has room for it (by property name):

* ``confidence``/``score``/``certainty``/``probability`` (number): the share of the offered
  tools whose call returned data (a ``count`` above 0, or a non-empty list), rounded to 2
  places and kept within the schema's bounds;
* ``sources``/``citations``/``references``/``evidence`` (array of strings): for the first
  record of each result that returned data (and each record cited in the reply), its id as
  ``<kind>:<id>`` where kind is the id's noun (``order:ord_5521``) or the tool's area
  (``kb:kb_shipping_times`` from ``kb.search``): the first form the item schema accepts;
* a string ``enum`` (e.g. a category or priority): the value whose keywords occur most often
  in the goal's labelled parts and the titles of the top results (each value is its own
  keyword; a small table adds ``shipping``: order, tracking, delivery...; ``billing``:
  charge, invoice, refund...; ``account``: login, password...; ``product``: size,
  colour...; ``urgent``: outage, down, asap...; ``high``: cannot, error, broken...; ``low``:
  question...); with no hit ``other``, ``normal``, ``medium``, ``unknown`` or ``none`` when
  the enum has one, else its first value;
* a boolean named like ``needs_human``/``escalate``/``needs_review``/``handoff``: true when
  no tool returned data, when a tool call failed or was refused, when the request asks for
  money back (refund, reimburse, chargeback, compensation, money back) or when the goal or a
  tool result looks like a prompt injection ("ignore previous instructions", "you are now",
  "system prompt"...);
* ``summary``/``reason``/``rationale``/``explanation``/``notes``/``findings`` (string): what
  was called and found, the values chosen and the flags raised;
* a string named like ``reply``/``answer``/``response``/``draft``/``message``: a reply that
  uses only facts from tool results: the top article's title and snippet, and the status
  of a record whose id the customer's own text mentions; when a human must decide, a
  holding reply that promises nothing.

Text taken from the goal or from results is sanitised like the rest of the local model's
output (no URLs, quotes or markup).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sealflow.providers.base import ModelRequest, ToolCall
from sealflow.providers.synth import phrase

MAX_QUERY_WORDS = 12
_ID_TOKEN = re.compile(r"\b([A-Za-z]{2,10})_([A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*)\b")
_NOT_ID_TAILS = {"id", "ids", "name", "names", "type", "key", "at", "on", "by", "of", "to", "count", "usd"}
_LABELS = re.compile(r"\b(subject|title|body|question|query|issue|description|message|request|text)\s*:\s*",
                     re.I)
_QUERY_NAMES = {"query", "q", "search", "search_query", "question", "keywords", "terms", "topic", "text"}
_STOP = {
    "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are", "as",
    "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can",
    "cannot", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from",
    "further", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if",
    "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "no", "nor", "not", "now",
    "of", "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over", "own", "same", "she",
    "should", "since", "so", "some", "such", "than", "that", "the", "their", "them", "then", "there", "these",
    "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were",
    "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your",
    "yours", "hi", "hello", "dear", "please", "thanks", "thank", "tell", "know", "get", "got"
}
_KEYWORDS = {
    "shipping": ["shipping", "ship", "shipped", "delivery", "deliver", "delivered", "tracking", "track", "parcel",
                 "package", "carrier", "order", "arrive", "arrival"],
    "billing": ["billing", "bill", "charge", "charged", "invoice", "payment", "refund", "subscription", "duplicate",
                "price", "receipt"],
    "account": ["account", "login", "log", "password", "reset", "sign", "access", "locked", "username"],
    "product": ["product", "size", "colour", "color", "model", "feature", "item", "material", "dimensions"],
    "urgent": ["urgent", "emergency", "outage", "down", "asap", "critical", "immediately"],
    "high": ["cannot", "unable", "error", "broken", "failing", "failed", "blocked"],
    "low": ["question", "wondering", "curious", "feedback", "suggestion"],
}
_DEFAULT_CHOICES = ("other", "normal", "medium", "unknown", "none")
_MONEY = re.compile(r"\b(refund\w*|reimburse\w*|chargeback\w*|compensat\w*|money back)\b", re.I)
_INJECTION = re.compile(r"\b(ignore|disregard|forget|override)\b[^.?!]{0,40}\b(instructions?|rules|prompts?)\b|"
                        r"\byou are now\b|\bsystem prompt\b|\bnew instructions\b|\bdeveloper mode\b", re.I)
_CONFIDENCE_NAMES = {"confidence", "score", "certainty", "probability"}
_SOURCE_NAMES = {"sources", "citations", "references", "evidence"}
_SUMMARY_NAMES = {"summary", "reason", "rationale", "explanation", "notes", "findings", "analysis"}
_REPLY_NAMES = {"reply", "answer", "response", "draft", "message", "draft_reply", "reply_text", "response_text"}
_HUMAN_WORDS = ("human", "escalat", "review", "handoff", "hand_off", "manual")


# --- which call next ---------------------------------------------------------------------------

def next_call(request: ModelRequest) -> ToolCall | None:
    """The next tool call to propose, or None when the agent should answer."""
    transcript = [t for t in request.transcript if isinstance(t, dict)]
    proposed = {t["call"].get("name") for t in transcript if isinstance(t.get("call"), dict)}
    results = [t.get("result") for t in transcript if t.get("status") == "ok"]
    for spec in request.tools:
        if spec.name in proposed:
            continue
        arguments = ground(spec.parameters, request.prompt, results)
        if arguments is not None:
            return ToolCall(spec.name, arguments, id=f"call_{len(transcript) + 1}")
    return None


def ground(parameters: Any, goal: str, results: list[Any]) -> dict[str, Any] | None:
    """Arguments for a tool with JSON Schema ``parameters``, or None when it cannot be grounded."""
    if not isinstance(parameters, dict):
        return None
    props = found if isinstance(found := parameters.get("properties"), dict) else {}
    required = [r for r in parameters.get("required", []) if isinstance(r, str)]
    out: dict[str, Any] = {}
    for name, schema in props.items():
        if not _accepts_string(schema):
            continue
        value = None
        if name.endswith("_id"):
            value = _find_id(name, goal, results)
        elif name in _QUERY_NAMES:
            value = query_text(goal) or None
        if value is not None:
            out[name] = value
    if any(r not in out for r in required):
        return None
    if props and not out:
        return None
    return out


def _accepts_string(schema: Any) -> bool:
    if not isinstance(schema, dict) or "enum" in schema or "const" in schema:
        return False
    kind = schema.get("type")
    return kind is None or kind == "string" or (isinstance(kind, list) and "string" in kind)


def _abbreviates(abbr: str, noun: str) -> bool:
    abbr, noun = abbr.lower(), noun.lower()
    if len(abbr) < 2 or not noun or abbr[0] != noun[0]:
        return False
    it = iter(noun)
    return all(ch in it for ch in abbr)


def id_tokens(text: str) -> list[str]:
    """Id-like tokens (``tkt_1001``, ``lead_acme``) in ``text``, in order."""
    return [m.group(0) for m in _ID_TOKEN.finditer(text) if m.group(2).lower() not in _NOT_ID_TAILS]


def _find_id(name: str, goal: str, results: list[Any]) -> str | None:
    noun = name[:-3]
    nouns = {noun, noun.split("_")[-1], noun.replace("_", "")}
    for token in id_tokens(goal):
        if any(_abbreviates(token.split("_", 1)[0], n) for n in nouns if n):
            return token
    for result in results:
        for key, value in _walk(result):
            if key == name and isinstance(value, str) and value:
                return value
    return None


def _walk(value: Any, depth: int = 0) -> Iterable[tuple[Any, Any]]:
    if depth > 6:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield k, v
            yield from _walk(v, depth + 1)
    elif isinstance(value, list):
        for v in value[:50]:
            yield from _walk(v, depth + 1)


def labelled_parts(goal: str) -> str:
    """The text of the goal's labelled parts (``Subject: ...``, ``Body: ...``), else the whole goal."""
    marks = list(_LABELS.finditer(goal))
    if not marks:
        return goal
    parts = [goal[m.end():(marks[i + 1].start() if i + 1 < len(marks) else len(goal))] for i, m in enumerate(marks)]
    return " ".join(p.strip() for p in parts)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", phrase(text, 10_000).lower())


def query_text(goal: str) -> str:
    """Up to 12 distinct content words of the goal's labelled parts (see the module docstring)."""
    text = labelled_parts(goal)
    ids = {t.lower() for t in id_tokens(text)}
    for token in ids:
        text = re.sub(re.escape(token), " ", text, flags=re.I)
    seen: dict[str, None] = {}
    for word in _words(text):
        if word not in _STOP and len(word) > 1 and not word.isdigit():
            seen.setdefault(word, None)
        if len(seen) >= MAX_QUERY_WORDS:
            break
    return " ".join(seen)


# --- the final answer --------------------------------------------------------------------------

@dataclass
class Findings:
    """What the tool calls of a transcript found, and the flags raised on the way."""

    offered: list[str]
    calls: list[str] = field(default_factory=list)
    useful: list[tuple[str, Any]] = field(default_factory=list)  # (tool, result) of calls that returned data
    failed: list[str] = field(default_factory=list)
    money: bool = False
    injection: bool = False

    @property
    def confidence(self) -> float:
        return round(len(self.useful) / len(self.offered), 2) if self.offered else 0.0

    @property
    def needs_human(self) -> bool:
        return not self.useful or bool(self.failed) or self.money or self.injection


def findings(request: ModelRequest) -> Findings:
    found = Findings(offered=[t.name for t in request.tools])
    parts = labelled_parts(request.prompt)
    found.money = bool(_MONEY.search(parts))
    found.injection = bool(_INJECTION.search(request.prompt))
    for turn in request.transcript:
        if not isinstance(turn, dict) or not isinstance(turn.get("call"), dict):
            continue
        name = str(turn["call"].get("name"))
        found.calls.append(name)
        if turn.get("status") != "ok":
            found.failed.append(name)
            continue
        result = turn.get("result")
        if _has_data(result):
            found.useful.append((name, result))
        if any(isinstance(v, str) and _INJECTION.search(v) for _, v in _walk(result)):
            found.injection = True
    return found


def _has_data(result: Any) -> bool:
    if isinstance(result, dict):
        count = result.get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            return count > 0
        lists = [v for v in result.values() if isinstance(v, list)]
        if lists:
            return any(lists)
        return bool(result)
    return result not in (None, "", [], False)


def records(result: Any) -> list[dict[str, Any]]:
    """The records of a tool result: its first list of maps, else the result itself when a map."""
    if isinstance(result, list):
        return [r for r in result if isinstance(r, dict)]
    if isinstance(result, dict):
        for value in result.values():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                return value
        return [result]
    return []


def _primary_id(record: dict[str, Any], tool: str) -> tuple[str, str] | None:
    """The record's own id: the ``<noun>_id`` whose noun names the tool's area (``order_id`` from
    ``orders.lookup``), else its first ``<noun>_id``."""
    ids = [(k[:-3], v) for k, v in record.items()
           if isinstance(k, str) and k.endswith("_id") and isinstance(v, str) and v]
    area = tool.split(".", 1)[0].lower()
    for noun, value in ids:
        if noun and (noun.lower() == area.rstrip("s") or _abbreviates(area, noun)):
            return noun, value
    return ids[0] if ids else None


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
