"""The deterministic local model, served under the model name ``default``.

No network, no weights: the same request always gets the same answer, whatever the
``temperature``. It exists so workflows run on a fresh machine and in tests.

* With an ``output_schema`` the output is an instance of the schema built by
  :func:`.synth.synthesize` from the prompt, and ``text`` is its canonical JSON.
* Without one the output is ``text``: ``"Summary: "`` and the first 40 words of the
  sanitised prompt, cut to ``max_tokens * 4`` characters when ``max_tokens`` is set.
* Tokens are estimated as ``len(system + prompt) // 4`` in and ``len(text) // 4`` out
  (at least 1 each); the cost is 0.
* With ``tools`` (an ``agent`` step) it acts as a deterministic agent: it proposes one
  grounded tool call per turn, then a final answer built from what the tools returned
  (:mod:`.local_agent`); input tokens then also count the tools and the transcript.

**Lead classification rule.** When the schema has a string ``enum`` holding ``high``
and ``low`` (like the lead-qualification example), that value is chosen by
:func:`assess_lead` from the prompt text (not the system prompt), and a string property
named ``reason`` (or ``rationale``, ``explanation``, ``justification``) gets the
evidence. Signals read from the prompt, case-insensitive:

* employees: the number after ``employees``/``employee_count``/``headcount`` (``"employees": 5000``,
  ``employees: 5,000``) or before the word ``employees``/``staff``/``people``;
* budget: the number after ``budget``/``budget_usd`` (``"budget_usd": 250000``, ``budget of $250k``);
* the word ``enterprise``; the small-business words ``solo``, ``freelance(r)``,
  ``hobby(ist)``, ``sole trader``, ``one-person``.

The lead is **high** if any high signal is present: ``enterprise``, >= 1,000 employees
or a budget >= $100,000. Otherwise it is **low** if some signal is small (< 50
employees, budget < $10,000, a small-business word) and none is mid-sized. Everything
else, including a lead with no signal at all, is **medium**. The first number found
for each signal counts; negations ("not enterprise") are not understood.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sealflow.core.errors import StepError
from sealflow.providers.base import ModelRequest, ModelResult
from sealflow.providers.synth import NOTHING, Hook, fit, phrase, synthesize

HIGH_EMPLOYEES = 1_000
HIGH_BUDGET_USD = 100_000
LOW_EMPLOYEES = 50
LOW_BUDGET_USD = 10_000

_NUM = r"(\d[\d,_]*(?:\.\d+)?)"
_EMPLOYEES = [re.compile(r"\b(?:employees|employee_count|headcount)\b[\"']?\s*[:=]?\s*" + _NUM, re.I),
              re.compile(_NUM + r"\s*(?:employees|staff|people)\b", re.I)]
_BUDGET = re.compile(r"\bbudget(?:_usd)?\b[\"']?\s*(?:[:=]|of|is)?\s*(?:usd|\$)?\s*" + _NUM + r"(?:\s*([km])\b)?",
                     re.I)
_ENTERPRISE = re.compile(r"\benterprise\b", re.I)
_SMALL = re.compile(r"\b(?:solo|freelancer?|freelance|hobby|hobbyist|sole trader|one-person)\b", re.I)
_REASON_NAMES = {"reason", "rationale", "explanation", "justification"}


@dataclass(frozen=True)
class LeadAssessment:
    """The outcome of the lead rule: ``label`` is high, medium or low; ``reason`` is never empty."""

    label: str
    reason: str
    employees: int | None = None
    budget_usd: float | None = None
    enterprise: bool = False
    small_business: bool = False


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("_", ""))


def assess_lead(text: str) -> LeadAssessment:
    """Apply the lead classification rule (module docstring) to ``text``."""
    employees = None
    for pattern in _EMPLOYEES:
        m = pattern.search(text)
        if m:
            employees = int(_number(m.group(1)))
            break
    budget = None
    m = _BUDGET.search(text)
    if m:
        budget = _number(m.group(1)) * {"k": 1e3, "m": 1e6}.get((m.group(2) or "").lower(), 1)
    enterprise = bool(_ENTERPRISE.search(text))
    small = bool(_SMALL.search(text))

    high = enterprise or (employees or 0) >= HIGH_EMPLOYEES or (budget or 0) >= HIGH_BUDGET_USD
    low_signals = [small, employees is not None and employees < LOW_EMPLOYEES,
                   budget is not None and budget < LOW_BUDGET_USD]
    mid_signals = [employees is not None and employees >= LOW_EMPLOYEES,
                   budget is not None and budget >= LOW_BUDGET_USD]
    label = "high" if high else "low" if any(low_signals) and not any(mid_signals) else "medium"

    evidence = []
    if enterprise:
        evidence.append("enterprise account")
    if employees is not None:
        evidence.append(f"{employees:,} employees")
    if budget is not None:
        evidence.append(f"a ${budget:,.0f} budget")
    if small:
        evidence.append("a small-business profile")
    if evidence:
        reason = f"{label} value: {', '.join(evidence)}"
    else:
        reason = f"{label} value: the lead gives no size or budget signal"
    return LeadAssessment(label, reason, employees, budget, enterprise, small)


def _has_rating_enum(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    enum = schema.get("enum")
    if isinstance(enum, list) and {"high", "low"} <= {e for e in enum if isinstance(e, str)}:
        return True
    props = schema.get("properties")
    return isinstance(props, dict) and any(_has_rating_enum(p) for p in props.values())


def _lead_hook(lead: LeadAssessment) -> Hook:
    def hook(name: Any, schema: dict[str, Any]) -> Any:
        enum = schema.get("enum")
        if isinstance(enum, list) and {"high", "low"} <= {e for e in enum if isinstance(e, str)}:
            for label in (lead.label, "medium", "low", "high"):
                if label in enum:
                    return label
        if name in _REASON_NAMES and schema.get("type", "string") == "string" and "pattern" not in schema \
                and "enum" not in schema and "const" not in schema:
            return fit(lead.reason, schema.get("minLength", 0), schema.get("maxLength"))
        return NOTHING

    return hook


class LocalModel:
    """The deterministic local model (see the module docstring). Pure: no state, no I/O."""

    name = "local"

    def complete(self, request: ModelRequest) -> ModelResult:
        if not isinstance(request.prompt, str):
            raise StepError("invalid_request", "the prompt must be text")
        schema = request.output_schema
        if schema is not None and not isinstance(schema, (dict, bool)):
            raise StepError("invalid_request", "output_schema must be a JSON Schema object")
        if request.max_tokens is not None and request.max_tokens < 1:
            raise StepError("invalid_request", f"max_tokens must be at least 1, not {request.max_tokens}")

        if request.tools or request.transcript:
            return self._agent_turn(request)
        if schema is None:
            text = self._summary(request.prompt, request.max_tokens)
            output: Any = text
        else:
            hook = _lead_hook(assess_lead(request.prompt)) if _has_rating_enum(schema) else None
            output = synthesize(schema, request.prompt, hook)
            text = json.dumps(output, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        source = (request.system or "") + request.prompt
        return ModelResult(output=output, text=text, input_tokens=max(1, len(source) // 4),
                           output_tokens=max(1, len(text) // 4), cost_usd=0.0, model=request.model)

    @staticmethod
    def _agent_turn(request: ModelRequest) -> ModelResult:
        """One agent turn: the next tool call, or the final answer (see :mod:`.local_agent`)."""
        from sealflow.providers import local_agent, local_answer

        call = local_agent.next_call(request)
        if call is not None:
            output: Any = None
            text = local_agent.canonical(call.to_dict())
        else:
            output = local_answer.answer(request)
            text = output if isinstance(output, str) else local_agent.canonical(output)
        tools = local_agent.canonical([[t.name, t.description, t.parameters] for t in request.tools])
        source = (request.system or "") + request.prompt + tools + local_agent.canonical(list(request.transcript))
        return ModelResult(output=output, text=text, input_tokens=max(1, len(source) // 4),
                           output_tokens=max(1, len(text) // 4), cost_usd=0.0, model=request.model, tool_call=call)

    @staticmethod
    def _summary(prompt: str, max_tokens: int | None) -> str:
        text = f"Summary: {phrase(prompt, 40)}"
        return fit(text, 0, max_tokens * 4) if max_tokens is not None else text
