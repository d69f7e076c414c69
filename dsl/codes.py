"""The registry of diagnostic codes: one entry per code, with its severity and a title.

Families: ``E000`` an internal error, ``Y`` loading YAML, ``S`` the schema, ``X`` expressions, ``C`` the compiler,
``L`` lint rules (their rationale lives in :mod:`sealflow.dsl.lint`). ``docs/language.md`` lists
them all; a test checks that every code the package emits is registered here.
"""

from __future__ import annotations

CODES: dict[str, tuple[str, str]] = {
    "E000": ("error", "internal error in sealflow itself (a bug: please report it)"),
    # loader
    "Y100": ("error", "the file cannot be read"),
    "Y101": ("error", "YAML syntax error"),
    "Y102": ("error", "duplicate mapping key"),
    "Y103": ("error", "mapping key is not a string"),
    "Y104": ("error", "YAML tag not allowed (only plain data; never !!python/...)"),
    "Y105": ("error", "YAML merge key '<<' not supported"),
    "Y106": ("error", "nesting deeper than the limit"),
    "Y107": ("error", "alias expansion or node count beyond the limit (billion laughs)"),
    "Y108": ("error", "file larger than the size limit (1 MiB by default)"),
    "Y109": ("error", "file is not UTF-8"),
    "Y110": ("error", "infinity, NaN or a number too large or too long for JSON (1e400, .inf)"),
    "Y111": ("error", "more than one YAML document in a file"),
    "Y112": ("error", "empty file"),
    "Y113": ("error", "integer outside ±(2^53 - 1), which JSON and the plan digest cannot hold exactly"),
    # schema
    "S201": ("error", "a required field is missing"),
    "S202": ("error", "unknown field"),
    "S203": ("error", "value has the wrong type"),
    "S204": ("error", "value not allowed (enum, const or pattern)"),
    "S205": ("error", "value out of range or wrong size"),
    "S206": ("error", "value does not match the schema"),
    "S207": ("error", "a referenced file ($ref, prompt) is missing or invalid"),
    "S208": ("error", "an embedded JSON Schema (input.schema, output_schema) is itself invalid"),
    "S209": ("error", "invalid cron expression or timezone"),
    # expressions
    "X301": ("error", "expression syntax error"),
    "X302": ("error", "unknown root in an expression"),
    "X303": ("error", "expression refers to an unknown step"),
    "X304": ("error", "expression refers to a step that cannot have run before it is evaluated"),
    "X305": ("error", "unknown function"),
    "X306": ("error", "wrong number of arguments to a function"),
    "X307": ("error", "expression too long or too deeply nested"),
    "X308": ("error", "'output' used outside validate/requires_approval_if"),
    "X309": ("error", "unknown field of a step or of run"),
    "X310": ("error", "item or index outside a map's steps, event outside a wait's match, or a step of a sub-flow read "
                      "from outside it"),
    "X311": ("error", "a step's output has no such field (its action's, ai's or set's declared output)"),
    "X312": ("error", "the input has no such field (input.schema declares its properties)"),
    # compiler
    "C401": ("error", "unknown next/goto target"),
    "C402": ("error", "duplicate step id"),
    "C403": ("error", "a step must have exactly one kind key"),
    "C404": ("error", "unreachable step"),
    "C405": ("error", "a cycle without budget.max_steps"),
    "C406": ("error", "step permission not declared by the workflow"),
    "C407": ("error", "retry class lists a never-retryable error class"),
    "C408": ("error", "hard cap exceeded (attempts, timeouts, budgets)"),
    "C409": ("error", "invalid duration"),
    "C410": ("error", "irreversible action without idempotency_key"),
    "C411": ("error", "unknown action"),
    "C412": ("error", "unknown retry class"),
    "C413": ("error", "action needs a permission the step does not list"),
    "C414": ("error", "malformed switch (default not last, or no branch)"),
    "C415": ("error", "file name does not match name and version"),
    "C416": ("error", "unsupported language version"),
    "C417": ("error", "unknown error class"),
    "C418": ("error", "invalid step id or field value"),
    "C419": ("error", "a map or parallel inside a map or parallel sub-flow (fan-out does not nest)"),
    "C420": ("error", "a keyed action with validate rules retries invalid_output: a retry replays the recorded result"),
    "C421": ("error", "with: names an argument the action does not take"),
    "C422": ("error", "with: leaves out an argument the action requires"),
    "C423": ("error", "a with: literal of the wrong type for the action's parameter"),
    "C424": ("error", "a with: expression whose type cannot fit the action's parameter"),
    "C425": ("warning", "a value that may be null flows into a parameter that does not take null"),
    "C426": ("error", "a model the project does not configure"),
    "C427": ("warning", "an action needs a secret that nothing here provides"),
    "C428": ("error", "an MCP tool that sealflow.mcp.lock does not pin (or no readable lock)"),
    # lint
    "L500": ("error", "lint ignore without a reason, or naming an unknown rule"),
    "L501": ("warning", "model output flows into an irreversible action unchecked"),
    "L502": ("warning", "approval gate whose on_timeout is not reject"),
    "L503": ("warning", "declared but unused permission"),
    "L504": ("warning", "ai/agent steps without a token or cost budget"),
    "L505": ("warning", "agent step without max_tool_calls"),
    "L506": ("warning", "lock held across an approval or a long wait"),
    "L507": ("info", "action metadata not loaded: action checks limited to names"),
    "L508": ("error", "irreversible action in a map without an idempotency_key that uses index or item"),
    "L509": ("warning", "map over model output with max_items at the hard cap"),
    # security diff (sealflow diff): "review" needs a security reviewer, "info" is for the record
    "D601": ("review", "permission added (workflow or step)"),
    "D602": ("info", "permission removed"),
    "D603": ("review", "budget raised, or removed (unlimited)"),
    "D604": ("info", "budget lowered, or added"),
    "D605": ("review", "retry attempts or backoff raised, more error classes retried, or retries on an "
                       "irreversible action"),
    "D606": ("info", "retry attempts or backoff lowered"),
    "D607": ("review", "approval gate removed (approval step or requires_approval_if)"),
    "D608": ("review", "approval gate weakened (approvers added, quorum lowered, on_timeout, separation of duties, "
                       "show changed or made constant, condition or when: changed, timeout lengthened)"),
    "D609": ("info", "approval gate added or strengthened"),
    "D610": ("review", "new irreversible action"),
    "D611": ("review", "new action whose effect is unknown (no --actions)"),
    "D612": ("info", "new action whose effect is read or write"),
    "D613": ("review", "new model (ai.model, ai.fallback, agent.model)"),
    "D614": ("review", "new agent tool"),
    "D615": ("info", "timeout lengthened (step, compensation)"),
    "D616": ("review", "idempotency_key dropped"),
    "D617": ("info", "idempotency_key changed"),
    "D618": ("review", "trigger added (schedule or event), or event trigger changed"),
    "D619": ("info", "trigger removed, or schedule cron/timezone changed"),
    "D620": ("review", "run_as identity changed"),
    "D621": ("review", "reauthorize turned off (or reauthorize: false written where the default was on)"),
    "D622": ("review", "output check removed or loosened (validate rule, output_schema)"),
    "D623": ("review", "new workflow"),
    "D624": ("info", "workflow removed"),
    "D625": ("info", "definition changed without a version bump"),
    "D626": ("info", "step added, removed or changed kind or action"),
    "D627": ("review", "input schema loosened (removed, emptied, opened, required or enum widened)"),
    "D628": ("review", "compensation removed or changed"),
    "D629": ("review", "run concurrency limit raised or removed, or its key changed"),
    "D630": ("review", "a write or irreversible step reachable without passing an approval it passed before"),
    "D631": ("review", "fan-out widened: map concurrency, max_items or tolerate_failures raised"),
    "D632": ("info", "fan-out narrowed: map concurrency, max_items or tolerate_failures lowered"),
    "D633": ("review", "what a wait takes from outside changed: its event's type, source, match or schema"),
    "D634": ("review", "a callback added, removed or changed: the step's result comes from outside"),
    "D635": ("review", "an agent's MCP tool added, or its pinned description/schema, effect or permissions changed"),
}


def severity(code: str) -> str:
    return CODES[code][0]


def title(code: str) -> str:
    return CODES[code][1]
