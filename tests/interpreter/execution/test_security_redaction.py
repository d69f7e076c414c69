"""Secrets never leak through escaping: a PEM key (newlines), a key with quotes and backslashes, and a key
inside a nested list are redacted from step outputs, errors, the audit trail, logs, dead letters and agent
transcripts in every form they take once written down (as is, JSON-escaped, repr-escaped, base64), at rest
(every byte of the state file) and in what the CLI prints (`status --json`, `audit --json`, `dlq --json`)."""

from __future__ import annotations

import base64
import glob
import json
import logging
from pathlib import Path

import pytest
from interp_helpers import S, make_plan

from sealflow.cli import main
from sealflow.core.errors import StepError
from sealflow.core.redaction import Redactor
from sealflow.dsl.plan import AgentPlan
from sealflow.execution.actions import action
from sealflow.providers.base import ModelResult, ToolCall
from sealflow.providers.recording import RecordingProvider
from sealflow.store import AuditEvent, auditchain

PEM = ("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIHq1sTcB9kUvJmPzRx3aWq0oYdLf8eNcGh2iVbE5tZ7K\n"
       "-----END PRIVATE KEY-----")
QUOTED = 'k3y"with\\back\'slash"and\\"quotes'
NESTED = 'nest\\"ed\nkey\t-99'


def as_is(secret):
    return {"key": secret}


def in_a_nested_list(secret):
    return {"deep": [[1, ["x", {"k": [secret, f"Bearer {secret}"]}]]]}


#: the three secrets of the issue: a PEM key, a key with quotes and backslashes, a key inside a nested list
CASES = {"pem": (PEM, as_is), "quotes": (QUOTED, as_is), "nested-list": (NESTED, in_a_nested_list)}
#: the value only ever appears redacted, under its name
MARK = "[redacted:api_key]"


def written(secret: str) -> dict[str, str]:
    """Every form of ``secret`` that must not appear anywhere (computed here, not by the redactor)."""
    raw = secret.encode()
    b64, url = base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()
    out = {"raw": secret, "json": json.dumps(secret)[1:-1], "json-utf8": json.dumps(secret, ensure_ascii=False)[1:-1],
           "json-twice": json.dumps(json.dumps(secret)[1:-1])[1:-1], "repr": repr(secret)[1:-1],
           "base64": b64, "base64-unpadded": b64.rstrip("="), "base64url": url, "base64url-unpadded": url.rstrip("=")}
    if secret is PEM:  # a line of the key's body is a leak on its own
        out["pem-body"] = PEM.splitlines()[1]
    return out


def assert_clean(text: str | bytes, secret: str, where: str) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    for form, value in written(secret).items():
        assert value.encode() not in data, f"the secret's {form} form leaked into {where}"


def assert_file_clean(path: str, secret: str) -> None:
    for name in glob.glob(f"{path}*"):
        assert_clean(Path(name).read_bytes(), secret, name)


@pytest.fixture(params=sorted(CASES))
def case(request, monkeypatch):
    secret, embed = CASES[request.param]
    monkeypatch.setenv("SEALFLOW_SECRET_API_KEY", secret)
    return secret, embed


def cli(capsys, runtime, *argv) -> tuple[int, str]:
    code = main([*argv, "--store", f"sqlite:///{runtime.store.path}"])
    out, err = capsys.readouterr()
    return code, out + err


# -- the redactor itself ----------------------------------------------------------------------------

def test_every_written_form_of_a_secret_is_blanked_out_of_text():
    red = Redactor()
    for secret in (PEM, QUOTED, NESTED):
        red.remember("api_key", secret)
        for form, value in written(secret).items():
            if form != "pem-body":  # a part of a key is not the key: it goes with the whole
                assert red.text(f"<{value}>") == f"<{MARK}>", form


def test_a_structure_is_redacted_leaf_by_leaf_and_left_alone_when_clean():
    red = Redactor()
    red.remember("api_key", QUOTED)
    clean = {"a": [1, {"b": "nothing here"}]}
    # Then a clean value comes back as the very object, a dirty one with every leaf (and key) redacted
    assert red.value(clean) is clean
    got = red.value({QUOTED: in_a_nested_list(QUOTED), "s": json.dumps({"t": QUOTED})})
    assert got == {MARK: in_a_nested_list(MARK), "s": json.dumps({"t": MARK})}
    # and JSON text is redacted as its value, then as text
    assert json.loads(red.json_text(json.dumps({"x": [[QUOTED]]}))) == {"x": [[MARK]]}


# -- step outputs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("encode", ["as-returned", "json-in-a-string", "base64"])
def test_a_secret_in_a_step_output_is_redacted_in_status_results_ledger_and_the_file(
        runtime, registry, case, encode, capsys):
    secret, embed = case

    @action("crm.echo", registry=registry, secrets=["api_key"])
    def echo(ctx):
        value = embed(ctx.secrets["api_key"])
        if encode == "json-in-a-string":
            return {"body": json.dumps(value)}
        if encode == "base64":
            key = ctx.secrets["api_key"].encode()
            return {"std": base64.b64encode(key).decode(), "url": base64.urlsafe_b64encode(key).decode().rstrip("=")}
        return value

    # Given an action returning its secret (recorded in the idempotency ledger too)
    plan = make_plan(S("call", "action", action="crm.echo", idempotency_key="echo-${{ run.id }}"),
                     output="${{ steps.call.output }}")
    # When it runs
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then the run completed, its output holds the name of the secret, never a form of its value
    assert status.state == "completed" and MARK in json.dumps(status.output, ensure_ascii=False)
    assert_clean(json.dumps(status.output), secret, "the run's output")
    assert_clean(repr(status.attempts), secret, "the attempts")
    assert_clean(repr(runtime.store.results(status.run.id)), secret, "the results")
    # and `status --json` prints none of it, nor does any byte of the state file hold it
    code, shown = cli(capsys, runtime, "status", status.run.id, "--json")
    assert code == 0 and MARK in shown
    assert_clean(shown, secret, "status --json")
    assert_file_clean(runtime.store.path, secret)


# -- errors and dead letters -------------------------------------------------------------------------

@pytest.fixture
def refused(runtime, registry, case):
    """A run whose action fails quoting its secret as repr and as JSON."""
    secret, embed = case

    @action("crm.refuse", registry=registry, secrets=["api_key"])
    def refuse(ctx):
        value = embed(ctx.secrets["api_key"])
        raise StepError("unauthorized", f"the CRM refused {value!r}; it said {json.dumps(value)}")

    status = runtime.run(make_plan(S("call", "action", action="crm.refuse")), {}, initiator="user:ana")
    assert status.state == "failed"
    return status, secret


def test_a_secret_in_an_error_message_is_redacted_in_the_step_and_run_errors(runtime, refused, capsys):
    status, secret = refused
    # Then the step's and the run's error name the secret, never its value
    assert status.error[0] == "unauthorized" and MARK in status.error[1]
    assert_clean(repr(status.error), secret, "the run's error")
    assert_clean(repr([a.error_message for a in status.attempts]), secret, "the attempt's error")
    code, shown = cli(capsys, runtime, "status", status.run.id, "--json")
    assert MARK in shown
    assert_clean(shown, secret, "status --json")
    assert_file_clean(runtime.store.path, secret)


def test_a_secret_in_a_failure_is_redacted_from_its_dead_letter(runtime, refused, capsys):
    status, secret = refused
    # Then the dead letter's reason names the secret, never its value, in the store and in `dlq`
    letter = runtime.store.dead_letter(status.run.id)
    assert letter is not None and MARK in letter.reason
    assert_clean(letter.reason, secret, "the dead letter")
    for argv in (("dlq", "list", "--json"), ("dlq", "show", status.run.id, "--json")):
        code, shown = cli(capsys, runtime, *argv)
        assert code == 0 and MARK in shown, argv
        assert_clean(shown, secret, " ".join(argv))


# -- the audit trail ---------------------------------------------------------------------------------

def test_a_secret_is_redacted_from_the_audit_trail_and_the_chain_still_verifies(runtime, refused, capsys):
    status, secret = refused
    _, embed = CASES[next(k for k, v in CASES.items() if v[0] == secret)]
    # Given also an event appended on its own, carrying the secret in its detail and its error
    runtime.store.append_audit(AuditEvent("operator.note", run_id=status.run.id, actor="user:ana",
                                          detail={"seen": embed(secret), "raw": json.dumps(embed(secret))},
                                          error=f"unauthorized: {secret!r}"), runtime.clock.now())
    # Then no event holds a form of the value, in the store or in `audit --json`
    events = runtime.audit(status.run.id)
    assert any(MARK in (e.error or "") for e in events) and events[-1].event == "operator.note"
    assert_clean(repr(events), secret, "the audit events")
    code, shown = cli(capsys, runtime, "audit", status.run.id, "--json")
    assert code == 0 and MARK in shown
    assert_clean(shown, secret, "audit --json")
    # and the chain was hashed over the redacted events: it verifies
    assert auditchain.verify(runtime.store).ok
    assert_file_clean(runtime.store.path, secret)


# -- logs --------------------------------------------------------------------------------------------

def test_a_secret_is_redacted_from_log_records_in_every_form(runtime, registry, case, caplog):
    secret, embed = case

    @action("crm.chatty", registry=registry, secrets=["api_key"])
    def chatty(ctx):
        key = ctx.secrets["api_key"]
        ctx.log.info("calling the CRM with %r", embed(key))
        logging.getLogger("sealflow.engine").warning("payload " + json.dumps(embed(key)))
        ctx.log.info("basic auth %s", base64.b64encode(key.encode()).decode())
        raise ValueError(f"the client choked on {embed(key)!r}")  # an unexpected error: logged with its traceback

    caplog.set_level(logging.DEBUG)
    status = runtime.run(make_plan(S("call", "action", action="crm.chatty")), {}, initiator="user:ana")
    # Then the step failed (internal), and no log record carries a form of the value, its traceback neither
    assert status.error[0] == "internal"
    assert any(MARK in r.getMessage() for r in caplog.records if r.name.startswith("sealflow"))
    for record in caplog.records:
        assert_clean(record.getMessage(), secret, f"the log record {record.name}")
    assert_clean(caplog.text, secret, "the log output")
    assert_file_clean(runtime.store.path, secret)


# -- agent transcripts -------------------------------------------------------------------------------

class Scripted:
    """A model that calls ``vault.read``, then answers with what it read (JSON-encoded, as models do)."""

    name = "scripted"

    def __init__(self):
        self.requests: list = []

    def complete(self, request):
        self.requests.append(request)
        if not request.transcript:
            return ModelResult(output=None, text="", input_tokens=1, output_tokens=1, cost_usd=0.0,
                               model=request.model, tool_call=ToolCall("vault.read", {"name": "crm"}, id="c1"))
        seen = request.transcript[-1].get("result")
        answer = {"answer": json.dumps(seen)}
        return ModelResult(output=answer, text=json.dumps(answer), input_tokens=1, output_tokens=1, cost_usd=0.0,
                           model=request.model)


def test_a_secret_is_redacted_from_agent_transcripts_recordings_and_the_answer(
        runtime, registry, providers, case, tmp_path):
    secret, embed = case

    @action("vault.read", registry=registry, permissions=["vault:read"], effect="read", secrets=["api_key"])
    def vault(ctx, name: str) -> dict:
        """Read a credential: an agent tool gets the secrets it declares, as an action step does."""
        return embed(ctx.secrets["api_key"])

    # Given an agent whose tool hands it the secret, its model calls recorded to a file
    recording = tmp_path / "calls.jsonl"
    model = Scripted()
    providers["m"] = RecordingProvider(model, recording)
    step = S("research", "agent", permissions=("vault:read",),
             agent=AgentPlan(model="m", goal="read the crm key", tools=("vault.read",), max_steps=3,
                             output_schema={"type": "object", "required": ["answer"],
                                            "properties": {"answer": {"type": "string"}}}, max_tokens=100))
    # When the agent runs
    status = runtime.run(make_plan(step, output="${{ steps.research.output }}"), {}, initiator="user:ana")
    # Then it completed; the transcript the model was sent, the recorded one, the attempt's transcript
    # summary and the answer hold the secret's name only
    assert status.state == "completed", status.error
    sent = json.dumps([list(r.transcript) for r in model.requests])
    assert MARK in sent
    assert_clean(sent, secret, "the transcript sent to the model")
    text = recording.read_text()
    assert MARK in text
    assert_clean(text, secret, "the model recording")
    assert_clean(json.dumps([a.data for a in status.attempts]), secret, "the attempt's transcript")
    assert_clean(json.dumps(status.output), secret, "the agent's answer")
    assert_file_clean(runtime.store.path, secret)
