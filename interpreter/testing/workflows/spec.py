"""A workflow test file: loaded with positions, validated against its JSON Schema, every error located.

The format is ``schemas/workflow-test.schema.json`` (docs/testing.md). A file names the definition it tests
(a path relative to itself) and holds cases; each case gives an input, what actions and models answer, the
faults injected at named steps, how approval gates are answered, and what must hold at the end.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from sealflow import schemas
from sealflow.dsl.document import Document
from sealflow.dsl.errors import DefinitionError, Diagnostic, Location
from sealflow.dsl.loader import load_file
from sealflow.dsl.plan import Plan
from sealflow.dsl.schema_errors import SchemaErrorMapper

SCHEMA = "workflow-test.schema.json"
#: the largest answer file read (``return_file``): an answer is a value, not a data set
MAX_ANSWER_BYTES = 8 * 2**20


class TestFileError(Exception):
    """A test file that cannot be used: its diagnostics, each with ``file:line:column``."""

    __test__ = False  # not a pytest test class

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics
        super().__init__("\n".join(d.format() for d in diagnostics))


@dataclasses.dataclass(frozen=True)
class Answer:
    """What a step's action returns, or the error class it fails with."""

    value: Any = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Fault:
    step: str
    error: str
    times: int = 1


@dataclasses.dataclass(frozen=True)
class Event:
    """An event delivered to the run when it waits at ``step`` (a wait for an event); None: the wait's own."""

    step: str
    data: Any
    id: str | None = None
    type: str | None = None
    source: str | None = None


@dataclasses.dataclass(frozen=True)
class CallbackResult:
    """A result posted for the callback of action step ``step`` (``data``, or a failure of class ``error``)."""

    step: str
    data: Any = None
    error: str | None = None
    message: str = ""


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    location: Location
    input: Any
    actions: dict[str, Answer]
    steps: dict[str, Answer]
    answers: dict[str, Any]
    faults: tuple[Fault, ...]
    #: step id -> approve | reject | expire, or {"edit": VALUE} (approve with the show value edited)
    approvals: dict[str, Any]
    cancel_at: str | None
    expect: dict[str, Any]
    #: where each expectation is written (for messages): key -> location
    expect_at: dict[str, Location]
    #: the step whose declared permissions the initiator loses once the run is submitted
    revoke_before: str | None = None
    #: the model recording that serves the calls the case does not answer (None: the local model)
    recording: Path | None = None
    #: every name the case gives that the definition must have: (what it must be, the name, where it is written);
    #: what: ``step``, ``action``, ``call`` (a step or an action), ``ai`` (an ``ai`` step), ``gate``
    refs: tuple[tuple[str, str, Location], ...] = ()
    #: write and irreversible actions that may act for real when the case leaves them unanswered (the file's
    #: ``real_actions``)
    real_actions: frozenset[str] = frozenset()
    #: events delivered to the run's waits, in order
    events: tuple[Event, ...] = ()
    #: results posted for callbacks, in order
    callbacks: tuple[CallbackResult, ...] = ()


@dataclasses.dataclass(frozen=True)
class TestFile:
    __test__ = False

    path: Path
    definition: Path
    cases: tuple[Case, ...]


def _schema_errors(doc: Document) -> list[Diagnostic]:
    validator = Draft202012Validator(schemas.load(SCHEMA))
    return SchemaErrorMapper(doc, schemas.load(SCHEMA), subject="test").diagnostics(
        validator.iter_errors(doc.data))


def _answer(doc: Document, pointer: tuple[Any, ...], raw: dict[str, Any], base: Path) -> Answer:
    if "error" in raw:
        return Answer(error=raw["error"])
    if "return_file" in raw:
        path = (base / raw["return_file"]).resolve()
        try:
            if path.exists() and not path.is_file():
                raise TestFileError([_diag(doc, (*pointer, "return_file"), f"{raw['return_file']} is not a file")])
            with path.open("rb") as f:
                data = f.read(MAX_ANSWER_BYTES + 1)
            if len(data) > MAX_ANSWER_BYTES:
                raise TestFileError([_diag(doc, (*pointer, "return_file"), f"{raw['return_file']} is larger than "
                                                                          f"{MAX_ANSWER_BYTES // 2**20} MiB")])
            return Answer(value=json.loads(data.decode("utf-8")))
        except OSError as exc:
            raise TestFileError([_diag(doc, (*pointer, "return_file"), f"cannot read {raw['return_file']}: "
                                       f"{exc.strerror or exc}")]) from None
        except ValueError as exc:  # not UTF-8, or not JSON
            raise TestFileError([_diag(doc, (*pointer, "return_file"),
                                       f"{raw['return_file']} is not JSON: {exc}")]) from None
    return Answer(value=raw.get("return"))


def _recording(doc: Document, at: tuple[Any, ...], value: str | None, base: Path) -> Path | None:
    if value is None:
        return None
    path = (base / value).resolve()
    if not path.is_file():
        where = (*at, "recording") if "recording" in doc.data["cases"][at[1]] else ("recording",)
        raise TestFileError([_diag(doc, where, f"no model recording at {value} (record one with sealflow run "
                                               f"--record {value}; docs/models.md)")])
    return path


def _diag(doc: Document, pointer: tuple[Any, ...], message: str, code: str = "T101") -> Diagnostic:
    return Diagnostic(code=code, message=message, location=doc.locate(pointer))


def load(path: str | Path) -> TestFile:
    """The test file at ``path``; :class:`TestFileError` with every located problem otherwise."""
    path = Path(path)
    try:
        doc = load_file(path)
    except DefinitionError as exc:
        raise TestFileError(list(exc.diagnostics)) from None
    errors = _schema_errors(doc)
    if errors:
        raise TestFileError(errors)
    data = doc.data
    base = path.parent
    definition = (base / data["definition"]).resolve()
    if not definition.is_file():
        what = "is not a file" if definition.exists() else "does not exist"
        raise TestFileError([_diag(doc, ("definition",), f"definition {data['definition']} {what} "
                                                         f"(a path relative to the test file)")])
    cases: list[Case] = []
    names: set[str] = set()
    real = list(data.get("real_actions", []))
    for i, raw in enumerate(data["cases"]):
        at = ("cases", i)
        if raw["name"] in names:
            raise TestFileError([_diag(doc, (*at, "name"), f"two cases are named {raw['name']!r}; names must be "
                                                           f"unique in a file")])
        names.add(raw["name"])
        expect = raw["expect"]
        refs = [(what, name, doc.locate((*at, *where))) for what, name, where in _named(raw)]
        refs += [("action", name, doc.locate(("real_actions", j))) for j, name in enumerate(real)] if i == 0 else []
        cases.append(Case(
            name=raw["name"], location=doc.locate(at), input=raw.get("input", {}),
            actions={k: _answer(doc, (*at, "actions", k), v, base) for k, v in raw.get("actions", {}).items()},
            steps={k: _answer(doc, (*at, "steps", k), v, base) for k, v in raw.get("steps", {}).items()},
            answers=dict(raw.get("answers", {})),
            faults=tuple(Fault(f["step"], f["error"], f.get("times", 1)) for f in raw.get("faults", [])),
            approvals=dict(raw.get("approvals", {})), cancel_at=raw.get("cancel_at"), expect=dict(expect),
            expect_at={k: doc.locate((*at, "expect", k)) for k in expect}, revoke_before=raw.get("revoke_before"),
            recording=_recording(doc, at, raw.get("recording") or data.get("recording"), base), refs=tuple(refs),
            real_actions=frozenset(real),
            events=tuple(Event(e["step"], e["data"], e.get("id"), e.get("type"), e.get("source"))
                         for e in raw.get("events", [])),
            callbacks=tuple(CallbackResult(c["step"], c.get("data"), c.get("error"), c.get("message", ""))
                            for c in raw.get("callbacks", []))))
    return TestFile(path=path, definition=definition, cases=tuple(cases))


def _named(raw: dict[str, Any]) -> list[tuple[str, str, tuple[Any, ...]]]:
    """The names a case gives (what each must be, the name, its path in the case)."""
    out: list[tuple[str, str, tuple[Any, ...]]] = []
    out += [("action", k, ("actions", k)) for k in raw.get("actions", {})]
    out += [("step", k, ("steps", k)) for k in raw.get("steps", {})]
    out += [("ai", k, ("answers", k)) for k in raw.get("answers", {})]
    out += [("step", f["step"], ("faults", i, "step")) for i, f in enumerate(raw.get("faults", []))]
    out += [("gate", k, ("approvals", k)) for k in raw.get("approvals", {})]
    out += [("step", raw[k], (k,)) for k in ("cancel_at", "revoke_before") if raw.get(k) is not None]
    out += [("event wait", e["step"], ("events", i, "step")) for i, e in enumerate(raw.get("events", []))]
    out += [("callback", c["step"], ("callbacks", i, "step")) for i, c in enumerate(raw.get("callbacks", []))]
    expect = raw["expect"]
    for key in ("ran", "not_ran"):
        out += [("step", name, ("expect", key, i)) for i, name in enumerate(expect.get(key, []))]
    for key in ("calls", "effects"):
        out += [("call", name, ("expect", key, name)) for name in expect.get(key, {})]
    return out


def unknown_names(spec: TestFile, plan: Plan) -> list[Diagnostic]:
    """A located error for each name a case gives that the definition does not have (a step, an action, an
    ``ai`` step, an approval gate): a typo would otherwise inject nothing, answer nothing, or expect nothing."""
    steps: dict[str, str] = {}
    gates: set[str] = set()
    event_waits: set[str] = set()
    with_callback: set[str] = set()
    actions: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("id"), str) and isinstance(node.get("kind"), str):
                steps[node["id"]] = node["kind"]
                if node.get("approval") is not None or node.get("requires_approval_if") is not None:
                    gates.add(node["id"])
                if isinstance(node.get("wait"), dict) and node["wait"].get("event"):
                    event_waits.add(node["id"])
                if node.get("callback"):
                    with_callback.add(node["id"])
            if isinstance(node.get("action"), str):
                actions.add(node["action"])
            if isinstance(node.get("tools"), list):
                actions.update(t for t in node["tools"] if isinstance(t, str))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(plan.model_dump(mode="json"))
    known = {"step": set(steps), "action": actions, "call": set(steps) | actions,
             "ai": {k for k, kind in steps.items() if kind == "ai"}, "gate": gates, "event wait": event_waits,
             "callback": with_callback}
    what_is = {"step": "step", "action": "action", "call": "step or action", "ai": "ai step",
               "gate": "approval gate", "event wait": "wait for an event",
               "callback": "step with a callback"}
    out: list[Diagnostic] = []
    for case in spec.cases:
        for what, name, where in case.refs:
            if name in known[what]:
                continue
            wrong_kind = what in ("ai", "gate", "event wait", "callback") and name in steps
            article = "an" if what_is[what][0] in "aeiou" else "a"
            message = (f"step {name!r} of {plan.name} is not {article} {what_is[what]}" if wrong_kind else
                       f"{plan.name} has no {what_is[what]} {name!r}")
            close = difflib.get_close_matches(name, sorted(known[what]), n=1)
            hint = f"did you mean {close[0]!r}?" if close else \
                f"its {what_is[what]}s: {', '.join(sorted(known[what])) or 'none'}"
            out.append(Diagnostic(code="T102", message=f"{message}; {hint}", location=where))
    return out


def discover(paths: list[Path]) -> list[Path]:
    """The test files named, or found under named folders (``*.test.yaml`` / ``*.test.yml``), sorted."""
    found: list[Path] = []
    for p in paths:
        if p.is_dir():
            found += sorted(q for q in p.rglob("*.test.y*ml") if q.is_file())
        else:
            found.append(p)
    return found


def cases_for(definition: Path) -> tuple[Case, ...]:
    """The cases of the test file beside ``definition`` (``tests/*.test.yaml`` in its folder) that tests it;
    none if there is no such file (or it cannot be loaded: ``sealflow test`` reports that)."""
    target = Path(definition).resolve()
    for candidate in sorted((target.parent / "tests").glob("*.test.y*ml")):
        try:
            spec = load(candidate)
        except TestFileError:
            continue
        if spec.definition == target:
            return spec.cases
    return ()
