"""The workflow JSON Schema and the mapping of its errors to located diagnostics."""

from __future__ import annotations

import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from sealflow import schemas
from sealflow.dsl.codes import CODES
from sealflow.dsl.loader import load_text
from sealflow.dsl.schema import schema_for_docs, validate, validate_embedded_schema
from sealflow.dsl.schema_errors import readable

# The full example of DSL.md, copied verbatim: it must validate as written.
FULL_EXAMPLE = """\
sealflow: 1
name: lead-qualification
version: 1
owner: team:sales-platform
description: Classify a lead with a model, then follow up once, after approval for high-value leads.
input:
  schema:
    type: object
    required: [lead_id]
    properties: {lead_id: {type: string, pattern: "^lead_[a-z0-9]+$"}}
permissions: [crm:read, crm:write, email:send]
budget: {max_steps: 20, max_runtime: 10m, max_tokens: 5000}
approvals: {approvers: [role:sales-manager], timeout: 24h}
defaults: {timeout: 20s, retry: transient}
retry:
  transient:
    on: [timeout, network, rate_limited, unavailable, invalid_output]
    max_attempts: 3
    backoff: {initial: 200ms, factor: 2, max: 2s, jitter: full}
  once: {max_attempts: 1}
steps:
  - id: fetch_lead
    action: crm.get_lead
    with: {lead_id: "${{ input.lead_id }}"}
    permissions: [crm:read]
  - id: classify
    ai:
      model: default
      prompt: {template: "Classify this lead: ${{ steps.fetch_lead.output }}"}
      output_schema:
        type: object
        required: [classification, reason]
        properties:
          classification: {enum: [high, medium, low]}
          reason: {type: string}
    validate: ["output.classification != 'high' or len(output.reason) > 0"]
  - id: route
    switch:
      - {when: "steps.classify.output.classification == 'low'", next: done}
      - {next: record}
  - id: record
    action: crm.add_note
    with: {lead_id: "${{ input.lead_id }}", note: "${{ steps.classify.output.reason }}"}
    permissions: [crm:write]
    idempotency_key: "${{ run.id }}:record"
    requires_approval_if: "steps.classify.output.classification == 'high'"
  - id: follow_up
    action: email.send
    with: {to: "${{ steps.fetch_lead.output.email }}", template: sales_followup}
    permissions: [email:send]
    idempotency_key: "${{ run.id }}:follow_up"
    retry: once
  - id: done
    succeed: {}
"""

HEADER = """\
sealflow: 1
name: lead-qualification
version: 3
owner: team:sales-platform
"""


# A definition using every field of the language (checked by the schema and by the model).
EVERYTHING_STEPS = textwrap.dedent("""\
        - id: a
          name: Fetch the lead
          description: reads the lead from the CRM
          action: crm.get_lead
          with: {lead_id: "${{ input.lead_id }}", options: {deep: true}}
          when: "input.lead_id != null"
          timeout: 5s
          retry: {on: [timeout], max_attempts: 3, backoff: {initial: 100ms, factor: 1.5, max: 1s, jitter: equal}}
          permissions: [crm:read]
          reauthorize: true
          idempotency_key: "${{ run.id }}:a"
          validate: ["len(output) > 0", {check: "output.email != null", message: "no email"}]
          requires_approval_if: "output.amount > 1000"
          on_error: [{errors: [unauthorized, policy_denied], next: stop}]
          compensate: {action: crm.delete_note, with: {id: "${{ steps.a.output.id }}"}, timeout: 10s, retry: once}
          concurrency: email
          lock: "lead:${{ input.lead_id }}"
          circuit_breaker: llm-provider
          budget: {max_tokens: 100, max_cost_usd: 0.1, max_tool_calls: 1}
          lint: {ignore: [L501], reason: reviewed by a human}
          next: b
        - id: b
          ai: {model: default, fallback: [other], prompt: {id: classify-lead, version: 2}, system: be brief,
               output_schema: {$ref: schemas/out.json}, max_tokens: 100, temperature: 0.2}
        - id: c
          agent: {model: default, goal: "find ${{ input.lead_id }}", tools: [crm.search], max_steps: 5,
                  max_tool_calls: 8, output_schema: {type: object}, system: s, max_tokens: 10, temperature: 0}
        - id: d
          switch: [{when: "steps.b.status == 'succeeded'", next: e}, {next: end}]
        - id: e
          approval: {approvers: [role:x, user:alice@example.com], quorum: 2, timeout: 2d,
                     on_timeout: {next: stop}, show: "steps.b.output", separation_of_duties: false}
        - id: f
          approval: {on_timeout: reject}
        - id: g
          wait: {for: 10m}
        - id: h
          wait: {until: "now() + duration('2h')"}
        - id: i
          set: {total: "1 + 2", label: "'x'", limit: 3, strict: true, none: null}
        - id: stop
          fail: {error: policy_denied, message: "stopped ${{ run.id }}"}
        - id: ok
          succeed: {output: "${{ steps.i.output }}"}
""")

EVERYTHING_TOP = textwrap.dedent("""\
        description: everything
        trigger:
          schedule: {cron: "0 6 * * 1-5", timezone: Europe/Paris, run_as: service:lead-batch}
          event: {type: crm.lead.created, source: crm, filter: "input.score > 3"}
        input: {schema: {$ref: schemas/lead-input.json}}
        permissions: [crm:read, crm:write, email:send]
        budget: {max_steps: 20, max_runtime: 15m, max_tokens: 20000, max_cost_usd: 0.50, max_tool_calls: 30}
        defaults: {timeout: 30s, retry: transient}
        retry:
          transient: {on: [timeout, network], max_attempts: 4}
          once: {max_attempts: 1}
        approvals: {approvers: [role:sales-manager], timeout: 24h, quorum: 1}
        concurrency: {key: "lead:${{ input.lead_id }}", limit: 1}
        priority: high
        output: {lead: "${{ input.lead_id }}", found: "${{ steps.c.output }}", n: 1}
""")


def check(text: str) -> list:
    return validate(load_text(textwrap.dedent(text), "definitions/t.v1.yaml"))


def workflow(steps: str, top: str = "") -> list:
    """Given a valid header, some top-level fields and a steps block, the diagnostics."""
    return check(HEADER + textwrap.dedent(top) + "steps:\n" + textwrap.indent(textwrap.dedent(steps), "  "))


def only(diagnostics: list):
    assert len(diagnostics) == 1, [d.format() for d in diagnostics]
    return diagnostics[0]


# ---------------------------------------------------------------- the schema itself

def test_schema_is_valid_2020_12():
    schema = schemas.load()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_schema_file_is_found_through_the_package():
    assert schemas.path().name == "workflow.schema.json"
    assert schemas.path().is_file()
    assert schema_for_docs() == schemas.load()
    assert schema_for_docs() is not schemas.load()


def _subschemas(node, where=()):
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            if key not in ("examples", "default", "const", "enum"):
                yield from _subschemas(value, where + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _subschemas(value, where + (i,))


def test_every_property_has_a_description():
    schema = schemas.load()
    missing = []
    for where, node in _subschemas(schema):
        for name, prop in node.get("properties", {}).items() if where[-1:] != ("properties",) else ():
            if not isinstance(prop, dict) or not prop.get("description"):
                missing.append("/".join(map(str, where + ("properties", name))))
    assert not missing
    for name, definition in schema["$defs"].items():
        assert definition.get("description"), name


def test_examples_and_defaults_validate_against_their_own_schema():
    schema = schemas.load()
    for where, node in _subschemas(schema):
        if where and where[0] == "$defs" and len(where) == 2 and where[1] == "inlineSchema":
            continue
        samples = list(node.get("examples", [])) + ([node["default"]] if "default" in node else [])
        if not samples:
            continue
        own = dict(node, **{"$defs": schema["$defs"]})
        own.pop("examples", None)
        own.pop("default", None)
        validator = Draft202012Validator(own)
        for sample in samples:
            assert not list(validator.iter_errors(sample)), (where, sample)


def test_kind_keys_are_all_optional_and_caps_are_not_encoded():
    step = schemas.load()["$defs"]["step"]
    assert step["required"] == ["id"]
    retry = schemas.load()["$defs"]["retryClass"]["properties"]["max_attempts"]
    assert "maximum" not in retry and "20" in retry["description"]


def test_duration_definition():
    assert schemas.load()["$defs"]["duration"]["pattern"] == "^[0-9]+(ms|s|m|h|d)$(?!\\n)"


# ---------------------------------------------------------------- valid documents

def test_full_example_of_dsl_md_validates():
    assert check(FULL_EXAMPLE) == []


def test_every_step_kind_and_field_validates():
    diagnostics = check(HEADER + EVERYTHING_TOP + "steps:\n" + textwrap.indent(EVERYTHING_STEPS, "  "))
    assert diagnostics == [], [d.format() for d in diagnostics]


def test_schema_valid_documents_are_accepted_by_the_model():
    from sealflow.dsl.model import Definition

    for text in (FULL_EXAMPLE, HEADER + EVERYTHING_TOP + "steps:\n" + textwrap.indent(EVERYTHING_STEPS, "  ")):
        doc = load_text(text)
        assert validate(doc) == []
        Definition.model_validate(doc.data)


def test_two_kind_keys_are_left_to_the_compiler():
    assert workflow("- {id: a, action: crm.get_lead, succeed: {}}\n") == []


def test_hard_cap_maxima_are_left_to_the_compiler():
    assert workflow("- {id: a, action: crm.get, retry: {max_attempts: 1000}, timeout: 400d}\n") == []


# ---------------------------------------------------------------- one test per mapping rule

def test_unknown_key_is_located_at_the_key_with_a_suggestion():
    d = only(workflow("""\
        - id: fetch
          action: crm.get_lead
          timout: 30s
        """))
    assert d.code == "S202"
    assert d.message == "unknown field 'timout' in steps[0]; did you mean 'timeout'?"
    assert (d.location.line, d.location.column) == (8, 5)
    assert d.pointer == "steps/0/timout"
    assert d.hint == "rename it to 'timeout'"


def test_unknown_top_level_key_lists_the_allowed_fields():
    d = only(check(HEADER + "stepz: []\nsteps: [{id: a, succeed: {}}]\n"))
    assert d.code == "S202"
    assert d.message == "unknown field 'stepz' at the top level; did you mean 'steps'?"
    assert (d.location.line, d.location.column) == (5, 1)
    d = only(check(HEADER + "colour: red\nsteps: [{id: a, succeed: {}}]\n"))
    assert "did you mean" not in d.message and "allowed fields:" in d.hint


def test_missing_required_field_points_at_the_object_and_names_it():
    d = only(workflow("""\
        - id: classify
          ai: {prompt: {template: hi}}
        """))
    assert d.code == "S201"
    assert d.message == "steps[0].ai: missing required field 'model'"
    assert (d.location.line, d.location.column) == (7, 9)
    assert d.hint == "add model: default"


def test_missing_top_level_fields_are_each_reported():
    diagnostics = check("sealflow: 1\nname: x-y\nsteps: [{id: a, succeed: {}}]\n")
    assert {d.message for d in diagnostics} == {
        "workflow: missing required field 'version'",
        "workflow: missing required field 'owner'",
    }
    assert all(d.code == "S201" and d.location.line == 1 for d in diagnostics)


def test_wrong_type_names_expected_and_actual_in_yaml_terms():
    d = only(workflow("- {id: a, action: crm.get, retry: {max_attempts: three}}\n"))
    assert d.code == "S203"
    assert d.message == "steps[0].retry.max_attempts: expected an integer, got string 'three'"
    d = only(workflow("- {id: a, action: crm.get, permissions: crm:read}\n"))
    assert d.message == "steps[0].permissions: expected a list, got string 'crm:read'"
    assert d.hint == "write a list: [crm:read]"
    d = only(check(HEADER + "steps: {id: a}\n"))
    assert d.message == "steps: expected a list, got map"


def test_unquoted_boolean_expression_gets_a_quoting_hint():
    d = only(workflow("- {id: a, action: crm.get, when: true}\n"))
    assert d.code == "S203"
    assert d.message == "steps[0].when: expected an expression (string), got boolean true"
    assert d.hint == 'quote the value: "true"'


def test_enum_lists_allowed_values_and_suggests():
    d = only(workflow("- {id: a, action: crm.get, on_error: [{errors: [timout], next: end}]}\n"))
    assert d.code == "S204"
    assert d.message.startswith("steps[0].on_error[0].errors[0]: 'timout' is not allowed; expected one of: timeout, ")
    assert d.message.endswith("; did you mean 'timeout'?")
    d = only(check(HEADER + "priority: urgent\nsteps: [{id: a, succeed: {}}]\n"))
    assert d.message == "priority: 'urgent' is not allowed; expected one of: critical, high, normal, low"


def test_const_and_pattern_are_described_in_words():
    diagnostics = check("sealflow: 2\nname: Lead_Q\nversion: 1\nowner: team:x\nsteps: [{id: a, succeed: {}}]\n")
    messages = {d.message for d in diagnostics}
    assert "sealflow: must be 1, got 2" in messages
    assert ("name: 'Lead_Q' must be 2 to 63 lower case letters, digits and '-', starting with a letter "
            "(like lead-qualification)") in messages
    assert {d.code for d in diagnostics} == {"S204"}


def test_malformed_duration_is_c409_wherever_it_is():
    diagnostics = workflow(
        "- {id: a, action: crm.get, timeout: 30}\n- {id: b, wait: {for: 1h30m}}\n",
        top="retry: {slow: {backoff: {initial: 30 s}}}\n",
    )
    assert [d.code for d in diagnostics] == ["C409", "C409", "C409"]
    by_pointer = {d.pointer: d for d in diagnostics}
    timeout = by_pointer["steps/0/timeout"]
    assert timeout.message.startswith("steps[0].timeout: 30 is not a valid duration; write a whole number")
    assert "500ms, 30s, 15m, 24h, 7d" in timeout.message
    assert timeout.hint.startswith("add a unit: '30s'")
    assert by_pointer["steps/1/wait/for"].hint == "use a single unit, e.g. 90m instead of 1h30m"
    assert by_pointer["retry/slow/backoff/initial"].hint == "remove the space: 30s"


def test_bad_cron_and_timezone_are_s209():
    diagnostics = check(HEADER + textwrap.dedent("""\
        trigger:
          schedule: {cron: "61 * * * *", timezone: Mars/Olympus, run_as: service:batch}
        steps: [{id: a, succeed: {}}]
        """))
    assert [d.code for d in diagnostics] == ["S209", "S209"]
    cron, zone = sorted(diagnostics, key=lambda d: d.location.column)
    assert cron.message == "trigger.schedule.cron: '61 * * * *' is not a valid cron expression"
    assert (cron.location.line, cron.location.column) == (6, 20)
    assert zone.message == "trigger.schedule.timezone: 'Mars/Olympus' is not an IANA time zone"


def test_range_errors_are_s205():
    diagnostics = workflow("- {id: a, action: crm.get, retry: {max_attempts: 0}, permissions: [crm:read, crm:read]}\n")
    assert {(d.code, d.message) for d in diagnostics} == {
        ("S205", "steps[0].retry.max_attempts: must be at least 1, got 0"),
        ("S205", "steps[0].permissions[1]: 'crm:read' is listed more than once"),
    }


def test_one_of_picks_the_branch_the_author_meant():
    # prompt is {id, version} or {template}: a template of the wrong type is reported as such.
    d = only(workflow("- {id: a, ai: {model: default, prompt: {template: 1}}}\n"))
    assert d.code == "S203"
    assert d.message == "steps[0].ai.prompt.template: expected a template (string), got integer 1"
    assert "valid under" not in d.message
    d = only(workflow("- {id: a, ai: {model: default, prompt: {id: classify}}}\n"))
    assert d.message == "steps[0].ai.prompt: missing required field 'version'"


def test_any_of_picks_the_branch_matching_the_type():
    # retry is a class name (string) or an inline class (map): a map is checked as a class.
    d = only(workflow("- {id: a, action: crm.get, retry: {max_attemps: 2}}\n"))
    assert d.code == "S202"
    assert d.message == "unknown field 'max_attemps' in steps[0].retry; did you mean 'max_attempts'?"
    d = only(workflow("- {id: a, action: crm.get, retry: 3}\n"))
    assert d.code == "S203"
    assert d.message.startswith("steps[0].retry: must be the name of a retry class or an inline retry class")
    d = only(workflow("- {id: a, approval: {on_timeout: approve}}\n"))
    assert d.message == ("steps[0].approval.on_timeout: must be reject or {next: <step id>} "
                         "(there is no auto-approve), got 'approve'")


def test_wait_needs_one_of_for_until_and_event():
    # (two of them at once is the compiler's C418: tests/cases/invalid/c418-wait-event-and-for.yaml)
    d = only(workflow("- {id: a, wait: {}}\n"))
    assert d.code == "S205"
    assert d.message == ("steps[0].wait: wait takes exactly one of 'for' (a duration), 'until' (an expression "
                         "giving a timestamp) or 'event' (with a timeout)")


def test_step_id_end_is_reserved():
    d = only(workflow("- {id: end, succeed: {}}\n"))
    assert d.code == "S204"
    assert "'end' is reserved" in d.message


def test_invalid_retry_class_name_is_located_at_the_key():
    d = only(check(HEADER + "retry:\n  Fast: {max_attempts: 2}\nsteps: [{id: a, succeed: {}}]\n"))
    assert d.code == "S204"
    assert d.message.startswith("retry: 'Fast' is not a valid name")
    assert (d.location.line, d.location.column) == (6, 3)


def test_file_reference_takes_only_ref():
    d = only(check(HEADER + "input: {schema: {$ref: schemas/in.json, tittle: x}}\nsteps: [{id: a, succeed: {}}]\n"))
    assert d.code == "S202"
    assert d.message == "unknown field 'tittle' in input.schema"


def test_multiple_errors_are_all_reported_best_first_without_duplicates():
    diagnostics = check(HEADER + textwrap.dedent("""\
        priority: urgent
        steps:
          - id: a
            action: crm.get
            timout: 30s
            retry: {max_attempts: 0}
          - id: b
            wait: {for: soon}
        """))
    assert [(d.code, d.pointer) for d in diagnostics] == [
        ("S204", "priority"),
        ("S202", "steps/0/timout"),
        ("C409", "steps/1/wait/for"),
        ("S205", "steps/0/retry/max_attempts"),
    ]
    assert len({(d.code, d.message, d.location) for d in diagnostics}) == len(diagnostics)


def test_messages_start_with_the_readable_field_path():
    assert readable(()) == "workflow"
    assert readable(("steps", 2, "retry", "max_attempts")) == "steps[2].retry.max_attempts"
    assert readable(("steps", 0, "with", "a key")) == "steps[0].with['a key']"


def test_every_code_emitted_is_registered():
    diagnostics = check(HEADER + textwrap.dedent("""\
        priority: urgent
        trigger: {schedule: {cron: nope, run_as: service:x}}
        input: {schema: {type: strin}}
        steps: [{id: a, action: x, timeout: 1, colour: red, retry: {max_attempts: 0}}, {id: b}]
        """))
    assert {d.code for d in diagnostics} <= set(CODES)
    assert {d.code for d in diagnostics} >= {"S202", "S204", "S205", "S208", "S209", "C409"}


# ---------------------------------------------------------------- embedded schemas

def test_embedded_schema_is_checked_against_the_metaschema():
    diagnostics = workflow("""\
        - id: a
          ai:
            model: default
            prompt: {template: hi}
            output_schema: {type: object, properties: {n: {type: integr}}}
        """)
    d = only(diagnostics)
    assert d.code == "S208"
    assert d.message.startswith("steps[0].ai.output_schema.properties.n.type: 'integr' is not allowed")
    assert d.message.endswith("did you mean 'integer'?")
    assert (d.location.line, d.location.column) == (10, 60)


def test_embedded_schema_misspelt_keyword_and_dialect():
    doc = load_text("input:\n  schema: {type: object, requird: [a],\n           $schema: 'http://json-schema.org/draft-04/schema#'}\n")
    diagnostics = validate_embedded_schema(doc.data["input"]["schema"], doc, ("input", "schema"))
    assert {d.code for d in diagnostics} == {"S208"}
    messages = sorted(d.message for d in diagnostics)
    assert messages[0].startswith("input.schema.$schema: only JSON Schema draft 2020-12 is supported")
    assert messages[1] == "input.schema.requird: unknown JSON Schema keyword 'requird'; did you mean 'required'?"


def test_embedded_schema_wrong_subschema_type_is_one_message():
    doc = load_text("s: {properties: {a: 5}}\n")
    d = only(validate_embedded_schema(doc.data["s"], doc, ("s",)))
    assert d.message == "s.properties.a: expected a JSON Schema (boolean or map), got integer 5"


def test_embedded_schema_bad_regex():
    doc = load_text("s: {type: string, pattern: '(['}\n")
    d = only(validate_embedded_schema(doc.data["s"], doc, ("s",)))
    assert d.code == "S208" and d.pointer == "s/pattern"


# ---------------------------------------------------------------- robustness

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(
    ["", "x", "30s", "end", "crm:read", "team:x", "${{ input.a }}", "crm.get_lead", "timeout"]))
_keys = st.sampled_from(["id", "steps", "action", "ai", "retry", "timeout", "wait", "for", "on", "next",
                         "sealflow", "name", "prompt", "approval", "on_timeout", "schema", "input", "zz",
                         "$ref", "$schema", "type", "properties", "output_schema", "set", "with"])
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=4)), max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _values, max_size=6))
def test_validate_never_raises_and_locates_everything(data):
    import json

    doc = load_text(json.dumps(data))
    for d in validate(doc):
        assert d.code in CODES
        assert d.location.line >= 1 and d.location.column >= 1
        assert "is not valid under any of the given schemas" not in d.message
