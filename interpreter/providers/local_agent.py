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
from dataclasses import dataclass, field
from typing import Any, Iterable

from sealflow.interpreter.providers.base import ModelRequest, ToolCall
from sealflow.interpreter.providers.synth import NOTHING, _string_ok, fit, phrase, synthesize

MAX_QUERY_WORDS = 12
_ID_TOKEN = re.compile(r"\b([A-Za-z]{2,10})_([A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*)\b")
_NOT_ID_TAILS = {"id", "ids", "name", "names", "type", "key", "at", "on", "by", "of", "to", "count", "usd"}
_LABELS = re.compile(r"\b(subject|title|body|question|query|issue|description|message|request|text)\s*:\s*",
                     re.I)
_QUERY_NAMES = {"query", "q", "search", "search_query", "question", "keywords", "terms", "topic", "text"}
_STOP = set("""a about above after again against all also am an and any are as at be because been before being
below between both but by can cannot could did do does doing down during each few for from further had has
have having he her here hers him his how i if in into is it its itself just me more most my no nor not now of
off on once only or other our ours out over own same she should since so some such than that the their them
then there these they this those through to too under until up very was we were what when where which while
who whom why will with would you your yours hi hello dear please thanks thank tell know get got""".split())
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


def ground(parameters: Any, goal: str, results: list) -> dict | None:
    """Arguments for a tool with JSON Schema ``parameters``, or None when it cannot be grounded."""
    if not isinstance(parameters, dict):
        return None
    props = parameters.get("properties") if isinstance(parameters.get("properties"), dict) else {}
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


def _find_id(name: str, goal: str, results: list) -> str | None:
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


def records(result: Any) -> list[dict]:
    """The records of a tool result: its first list of maps, else the result itself when a map."""
    if isinstance(result, list):
        return [r for r in result if isinstance(r, dict)]
    if isinstance(result, dict):
        for value in result.values():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                return value
        return [result]
    return []


def _primary_id(record: dict, tool: str) -> tuple[str, str] | None:
    """The record's own id: the ``<noun>_id`` whose noun names the tool's area (``order_id`` from
    ``orders.lookup``), else its first ``<noun>_id``."""
    ids = [(k[:-3], v) for k, v in record.items()
           if isinstance(k, str) and k.endswith("_id") and isinstance(v, str) and v]
    area = tool.split(".", 1)[0].lower()
    for noun, value in ids:
        if noun and (noun.lower() == area.rstrip("s") or _abbreviates(area, noun)):
            return noun, value
    return ids[0] if ids else None


class Answer:
    """Builds the final output from a request's findings (see the module docstring)."""

    def __init__(self, request: ModelRequest):
        self.request = request
        self.found = findings(request)
        self.parts = labelled_parts(request.prompt)
        self.choices: dict[Any, str] = {}
        self.cited: list[tuple[str, str, dict]] = []  # (tool, noun, record) cited by the reply

    def output(self, schema: Any) -> Any:
        self._choose_enums(schema)
        self.reply_text = self._reply()
        if schema is None:
            return f"{self._summary()}\n\n{self.reply_text}"
        return synthesize(schema, self.request.prompt, self.hook)

    # the hook synth calls for every value: NOTHING means "build it as usual"
    def hook(self, name: Any, schema: dict) -> Any:
        if not isinstance(name, str):
            return NOTHING
        key = name.lower()
        kind = schema.get("type")
        free_text = kind in (None, "string") and not ({"pattern", "enum", "const", "format"} & set(schema))
        if name in self.choices and isinstance(schema.get("enum"), list):
            return self.choices[name]
        if key in _CONFIDENCE_NAMES and kind in ("number", "integer"):
            return self._bounded(schema, self.found.confidence)  # NOTHING when it cannot honour multipleOf
        if kind == "boolean" and any(w in key for w in _HUMAN_WORDS):
            return self.found.needs_human
        if kind == "array" and key in _SOURCE_NAMES:
            return self._sources(schema)
        if free_text and key in _SUMMARY_NAMES:
            return fit(self._summary(), schema.get("minLength", 0), schema.get("maxLength"))
        if free_text and (key in _REPLY_NAMES or "reply" in key):
            return fit(self.reply_text, schema.get("minLength", 0), schema.get("maxLength"))
        return NOTHING

    def _choose_enums(self, schema: Any, depth: int = 0) -> None:
        if not isinstance(schema, dict) or depth > 8:
            return
        props = schema.get("properties")
        if not isinstance(props, dict):
            return
        text = " ".join([self.parts] + [str(r.get("title")) for _, res in self.found.useful
                                        for r in records(res)[:1] if r.get("title")])
        words = _words(text)
        for name, sub in props.items():
            if isinstance(sub, dict) and isinstance(sub.get("enum"), list):
                values = [v for v in sub["enum"] if isinstance(v, str)]
                if len(values) >= 2:
                    self.choices[name] = choose(values, words)
            else:
                self._choose_enums(sub, depth + 1)

    @staticmethod
    def _bounded(schema: dict, value: float) -> Any:
        """``value`` (a share, 0..1) within the schema's bounds; an integer schema of 0..100 gets a percentage."""
        high = schema.get("maximum", schema.get("exclusiveMaximum"))
        if schema.get("type") == "integer":
            value = round(value * (100 if isinstance(high, (int, float)) and high >= 100 else 1))
        bounds = [(schema.get("minimum"), False, 1), (schema.get("exclusiveMinimum"), True, 1),
                  (schema.get("maximum"), False, -1), (schema.get("exclusiveMaximum"), True, -1)]
        for bound, exclusive, side in bounds:
            if not isinstance(bound, (int, float)) or isinstance(bound, bool):
                continue
            if (value - bound) * side < 0 or (exclusive and value == bound):
                step = 1 if schema.get("type") == "integer" else 0.01
                value = bound + side * step if exclusive else bound
        if "multipleOf" in schema:
            return NOTHING
        return value

    def _sources(self, schema: dict) -> Any:
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        pattern, low, high = items.get("pattern"), items.get("minLength", 0), items.get("maxLength")
        chosen: list[str] = []
        candidates = [(tool, r) for tool, res in self.found.useful for r in records(res)[:1]]
        candidates += [(tool, r) for tool, _noun, r in self.cited]
        for tool, record in candidates:
            ident = _primary_id(record, tool)
            if ident is None:
                continue
            noun, value = ident
            area = tool.split(".", 1)[0]
            forms = [f"{noun}:{value}", f"{area.rstrip('s')}:{value}", f"{area}:{value}",
                     f"{value.split('_', 1)[0]}:{value}"]
            for form in forms:
                if _string_ok(form, low, high, pattern):
                    if form not in chosen:
                        chosen.append(form)
                    break
        cap = schema.get("maxItems")
        chosen = chosen[:cap] if isinstance(cap, int) else chosen
        if len(chosen) < schema.get("minItems", 0):
            return NOTHING
        return chosen

    def _summary(self) -> str:
        f = self.found
        if f.calls:
            called = f"Called {', '.join(f.calls)}; {len(f.useful)} of {len(f.offered)} offered tools returned data."
        else:
            called = "No tool was called: nothing in the request identified what to look up."
        chosen = ", ".join(f"{k} {v}" for k, v in self.choices.items())
        flags = []
        if f.injection:
            flags.append("the request contains instructions addressed to the assistant (possible prompt injection)")
        if f.money:
            flags.append("the customer asks for money back")
        if f.failed:
            flags.append(f"{', '.join(f.failed)} failed or was refused")
        if not f.useful:
            flags.append("no tool returned data")
        text = called
        if chosen:
            text += f" Proposed {chosen}."
        if flags:
            text += f" Needs a human: {'; '.join(flags)}."
        return phrase(text, 200) if text else "local agent summary"

    def _reply(self) -> str:
        subject = _subject(self.request.prompt)
        opening = f"Thank you for your message \"{subject}\"." if subject else "Thank you for your message."
        if self.found.needs_human:
            body = "A member of our support team is looking into it and will get back to you shortly."
            return f"Hello,\n\n{opening} {body}\n\nKind regards,\nCustomer support"
        facts = []
        mentioned = {t.lower() for t in id_tokens(self.parts)}
        for tool, result in self.found.useful:
            recs = records(result)
            top = recs[0] if recs else {}
            if top.get("title") and top.get("snippet"):
                facts.append(f"Our help article \"{_clean(top['title'])}\" says: {_sentences(top['snippet'])}")
                self.cited.append((tool, "", top))
            for record in recs:
                ident = _primary_id(record, tool)
                if ident and ident[1].lower() in mentioned and "status" in record:
                    facts.append(_record_fact(ident, record))
                    self.cited.append((tool, ident[0], record))
                    break
        if not facts:
            facts.append("We are looking into it and will get back to you shortly.")
        return f"Hello,\n\n{opening}\n\n" + "\n\n".join(facts) + "\n\nKind regards,\nCustomer support"


def choose(values: list[str], words: list[str]) -> str:
    """The enum value whose keywords occur most often in ``words`` (see the module docstring)."""
    best, best_score = None, 0
    for value in values:
        keys = [value.lower()] + _KEYWORDS.get(value.lower(), [])
        score = sum(1 for w in words for k in keys if w == k or (w.startswith(k) and len(w) - len(k) <= 3))
        if score > best_score:
            best, best_score = value, score
    if best is not None:
        return best
    for default in _DEFAULT_CHOICES:
        if default in values:
            return default
    return values[0]


def _subject(goal: str) -> str:
    m = re.search(r"\b(?:subject|title)\s*:\s*(.+?)(?:\s*[.?!]\s+\b(?:body|question|description|message)\s*:|$)",
                  goal, re.I | re.S)
    return _clean(m.group(1))[:120] if m else ""


def _clean(text: Any) -> str:
    return phrase(str(text), 80).rstrip(".")


def _sentences(text: Any) -> str:
    """``text`` sanitised and cut after its last complete sentence (snippets are often cut mid-word)."""
    clean = phrase(str(text), 80)
    if clean.endswith((".", "!", "?")):
        return clean
    end = max(clean.rfind(". "), clean.rfind("! "), clean.rfind("? "))
    return clean[:end + 1] if end > 0 else clean + "..."


def _record_fact(ident: tuple[str, str], record: dict) -> str:
    noun, value = ident
    preferred = ("status", "estimated", "delivery", "carrier", "tracking")
    keys = [k for k, v in record.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)
            and isinstance(k, str) and not k.endswith("_id") and len(str(v)) <= 40]
    keys.sort(key=lambda k: next((i for i, p in enumerate(preferred) if p in k), len(preferred)))
    details = ", ".join(f"{k.replace('_', ' ')} {_clean(record[k])}" for k in keys[:4])
    return f"{noun.capitalize()} {value}: {details}."


def answer(request: ModelRequest) -> Any:
    """The final output for an agent request (see the module docstring)."""
    return Answer(request).output(request.output_schema)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
