"""The local model's final answer to an agent request: the output built from what the tools returned.

:mod:`.local_agent` decides the next tool call and gathers the findings; this module turns the findings
into the requested output (an object filled field by field, or a reply text) and picks enum values by
keywords (:func:`choose`).
"""

from __future__ import annotations

import re
from typing import Any

from sealflow.providers.base import ModelRequest
from sealflow.providers.local_agent import (
    _CONFIDENCE_NAMES,
    _DEFAULT_CHOICES,
    _HUMAN_WORDS,
    _KEYWORDS,
    _REPLY_NAMES,
    _SOURCE_NAMES,
    _SUMMARY_NAMES,
    _primary_id,
    _words,
    findings,
    id_tokens,
    labelled_parts,
    records,
)
from sealflow.providers.synth import NOTHING, _string_ok, fit, phrase, synthesize


class Answer:
    """Builds the final output from a request's findings (see the module docstring)."""

    def __init__(self, request: ModelRequest):
        self.request = request
        self.found = findings(request)
        self.parts = labelled_parts(request.prompt)
        self.choices: dict[Any, str] = {}
        self.cited: list[tuple[str, str, dict[str, Any]]] = []  # (tool, noun, record) cited by the reply

    def output(self, schema: Any) -> Any:
        self._choose_enums(schema)
        self.reply_text = self._reply()
        if schema is None:
            return f"{self._summary()}\n\n{self.reply_text}"
        return synthesize(schema, self.request.prompt, self.hook)

    # the hook synth calls for every value: NOTHING means "build it as usual"
    def hook(self, name: Any, schema: dict[str, Any]) -> Any:
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
    def _bounded(schema: dict[str, Any], value: float) -> Any:
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

    def _sources(self, schema: dict[str, Any]) -> Any:
        items = found if isinstance(found := schema.get("items"), dict) else {}
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


def _record_fact(ident: tuple[str, str], record: dict[str, Any]) -> str:
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
