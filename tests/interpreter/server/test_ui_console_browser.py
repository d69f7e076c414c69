"""The console in a real browser (Debian's headless Chromium): every page has no serious or critical axe-core
violation and is photographed (docs/images/ with ``SEALFLOW_UPDATE_SCREENSHOTS=1``); a newcomer's session finds a
failed run by filter, reads the failing step's traceback and the model's answer and redrives it as an operator;
a reviewer judges a gate and approves it from the page with the keyboard alone."""

from __future__ import annotations

import pytest
import test_ui_browser as ui
from axe_helpers import axe_script, screenshot, violations
from interp_helpers import FakeProvider, S, gate, make_plan

from sealflow.core.breakers import BreakerSettings
from sealflow.dsl.plan import AiPlan, BudgetPlan, TriggerPlan, ValidateRulePlan
from sealflow.execution.actions import action
from sealflow.server.settings import ServerSettings

By = ui.By
Keys = pytest.importorskip("selenium.webdriver.common.keys").Keys


@pytest.fixture(scope="session")
def axe():
    return axe_script()


@pytest.fixture
def served(rt, known):
    yield from ui.serving(rt, ServerSettings(rate=0, work=False))


@pytest.fixture
def chromium(tmp_path):
    yield from ui.open_browser(tmp_path)


@pytest.fixture
def world(rt, registry, clock, known, operator):
    """A store with what every page shows: a failed run of alice's (its model step answered, then ``t.file``
    raised a KeyError; it succeeds when run again), a refund run waiting for a second manager's approval, an
    open circuit breaker, a scheduled workflow, and a second version of approve-flow. -> (failed, refund)"""
    calls, paid = [], []

    @action("t.file", registry=registry)
    def file(ctx, label):
        calls.append(label)
        return {"filed": {}[label]} if len(calls) == 1 else {"filed": label}

    action("t.record", registry=registry)(lambda ctx, amount: {"amount": amount})
    action("t.pay", registry=registry)(lambda ctx, amount, to: paid.append((amount, to)) or {"paid": amount})
    rt.providers["fake"] = FakeProvider({"label": "hot", "reason": "asked for a quote twice this week"}, tokens=40)
    lead = make_plan(S("classify", "ai", ai=AiPlan(model="fake", prompt_template="Classify",
                                                   prompt_ref={"id": "prompts/classify.md", "version": "2"})),
                     S("file", "action", action="t.file", args={"label": "${{ steps.classify.output.label }}"}),
                     name="lead-flow", budget=BudgetPlan(max_tokens=1000, max_steps=20))
    refund = make_plan(
        S("propose", "ai", ai=AiPlan(model="fake", prompt_template="Propose a refund"),
          validations=(ValidateRulePlan(check="output.label == 'hot'", message="only hot leads"),)),
        S("record", "action", action="t.record", args={"amount": 120},
          requires_approval_if="output.amount > 100", gate=gate(quorum=2)),
        S("pay", "action", action="t.pay", args={"amount": "${{ steps.record.output.amount }}",
                                                  "to": "${{ input.customer }}"}),
        name="refund-flow")
    for _ in range(3):  # some runs that completed, for the list
        clock.advance(60)
        done = rt.submit(known, {"amount": 5}, initiator="user:alice", tenant="acme")
        rt.drive(done)
        rt.approve(done, "ask", actor="user:bob", tenant="acme")
        rt.drive(done)
    clock.advance(60)
    failed = rt.submit(lead, {"lead": 7}, initiator="user:alice", tenant="acme")
    assert rt.drive(failed).state == "failed"
    clock.advance(60)
    waiting = rt.submit(refund, {"customer": "c-42"}, initiator="user:alice", tenant="acme")
    assert rt.drive(waiting).state == "waiting"
    rt.approve(waiting, "record", actor="user:bob", tenant="acme")
    for _ in range(3):
        rt.store.breaker_record("crm.api", clock.now(), BreakerSettings(failures=3), error_class="network",
                                probe=False, message="connection refused")
    nightly = make_plan(S("a", "set", assign={"x": "1"}), name="nightly-report", trigger=TriggerPlan(
        schedule={"cron": "0 9 * * *", "timezone": "Europe/Paris", "run_as": "service:nightly"}))
    second = make_plan(S("act", "action", action="t.note", args={"text": "no approval"}), name="approve-flow",
                       version=2)
    for plan in (nightly, second):
        rt.store.put_plan(plan.digest, plan.name, plan.version, plan.to_json(indent=None), clock.now())
    return failed, waiting, second, paid


def _sign_out(browser, server):
    browser.find_element(By.CSS_SELECTOR, "header form button").click()
    ui.arrive(browser, server + "/ui/signin")


def test_every_page_has_no_serious_axe_violation_and_is_photographed(served, chromium, rt, world, known, axe,
                                                                       tmp_path):
    failed, waiting, second, _ = world
    found: dict[str, list] = {}
    shots = []

    def check(name: str) -> None:
        found[name] = violations(chromium, axe)
        shots.append(screenshot(chromium, f"console-{name}", tmp_path / "images"))

    # Given each page as the person it is for
    chromium.get(served + "/ui/signin")
    check("signin")
    ui.sign_in(chromium, served, ui.token(rt, "user:cy"))
    check("approvals")
    _sign_out(chromium, served)
    ui.sign_in(chromium, served, ui.token(rt, "user:ops"))
    chromium.get(served + "/ui/runs")
    check("runs")
    chromium.get(f"{served}/ui/runs/{failed}")
    check("run")
    chromium.get(served + "/ui/dlq")
    check("dead-letters")
    _sign_out(chromium, served)
    ui.sign_in(chromium, served, ui.token(rt, "user:root"))
    for page in ("breakers", "schedules"):
        chromium.get(f"{served}/ui/{page}")
        check(page)
    chromium.get(f"{served}/ui/definitions?old={known.digest}&new={second.digest}")
    check("definitions")
    # Then axe-core finds no serious or critical violation on any of them, and each was photographed
    assert {name: v for name, v in found.items() if v} == {}
    assert len(shots) == 8 and all(p.stat().st_size > 5_000 for p in shots)


def test_a_newcomer_finds_the_failed_run_reads_why_and_redrives_it(served, chromium, rt, world):
    failed, _, _, _ = world
    # Given the operator of acme's runs, signed in for the first time
    ui.sign_in(chromium, served, ui.token(rt, "user:ops"))
    # When they open the runs, tick the failed state and filter
    chromium.find_element(By.LINK_TEXT, "Runs").click()
    ui.arrive(chromium, served + "/ui/runs")
    chromium.find_element(By.ID, "state-failed").click()
    chromium.find_element(By.ID, "apply").click()
    ui.WebDriverWait(chromium, 15).until(ui.EC.url_contains("state=failed"))  # (the form's empty fields too)
    rows = chromium.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    # Then only the failed run is listed, and they open it
    assert len(rows) == 1 and failed in rows[0].text
    rows[0].find_element(By.LINK_TEXT, failed).click()
    ui.arrive(chromium, f"{served}/ui/runs/{failed}")
    # And they read the failing step's traceback and what the model answered before it (both unfolded)
    assert "KeyError" in chromium.find_element(By.ID, "trace-file").text
    assert '"label": "hot"' in chromium.find_element(By.ID, "output-classify").text
    # When they redrive it, confirming
    chromium.find_element(By.ID, "redrive-confirm").click()
    chromium.find_element(By.ID, "redrive").click()
    ui.arrive(chromium, f"{served}/ui/runs/{failed}?notice=redriven")
    # Then the page says so and the run completes
    assert "Redriven" in chromium.find_element(By.ID, "notice").text
    assert rt.drive(failed).state == "completed"


def test_a_reviewer_judges_the_gate_and_approves_it_with_the_keyboard(served, chromium, rt, world):
    _, waiting, _, paid = world
    # Given cy, the second manager, signed in
    ui.sign_in(chromium, served, ui.token(rt, "user:cy"))
    section = chromium.find_element(By.ID, f"gate-{waiting}-record@gate")
    # Then she sees what the model proposed and why, the rule that asked, what runs next and who approved
    assert "asked for a quote twice this week" in section.find_element(By.CLASS_NAME, "reasons").text
    assert "validate: output.label == 'hot'" in section.find_element(By.CLASS_NAME, "validations").text
    assert "output.amount > 100" in section.find_element(By.CLASS_NAME, "rule").text
    assert "t.pay" in section.find_element(By.CLASS_NAME, "will-run").text
    assert "1 of 2: approved by user:bob" in section.find_element(By.CLASS_NAME, "quorum").text
    # When she moves to the Approve button with the Tab key alone from the reason field, and presses Enter
    section.find_element(By.TAG_NAME, "textarea").click()
    active = chromium.switch_to.active_element
    for _ in range(5):
        active.send_keys(Keys.TAB)
        active = chromium.switch_to.active_element
        if active.get_attribute("class") == "approve":
            break
    assert active.get_attribute("class") == "approve"
    active.send_keys(Keys.ENTER)
    ui.arrive(chromium, served + "/ui/approvals?notice=approved")
    # Then the quorum is met and the run pays the refund
    assert rt.drive(waiting).state == "completed" and paid == [(120, "c-42")]


def test_a_run_page_follows_the_run_live(served, chromium, rt, known, notes):
    # Given alice on the page of her run waiting at its approval gate
    run_id = rt.submit(known, {"amount": 5}, initiator="user:alice", tenant="acme")
    assert rt.drive(run_id).state == "waiting"
    ui.sign_in(chromium, served, ui.token(rt, "user:alice"))
    chromium.get(f"{served}/ui/runs/{run_id}")
    assert chromium.find_element(By.ID, "state").text == "waiting"
    # When bob approves it elsewhere and it runs to its end
    rt.approve(run_id, "ask", actor="user:bob", tenant="acme")
    assert rt.drive(run_id).state == "completed"
    # Then her page, not reloaded by her, shows the run completed and its last step succeeded
    ui.WebDriverWait(chromium, 20).until(lambda b: b.find_element(By.ID, "state").text == "completed")
    row = chromium.find_element(By.CSS_SELECTOR, '#steps tr[data-step="act"] .badge')
    assert row.text == "succeeded"


def test_the_runs_list_refreshes_itself_when_asked_and_remembers_it(served, chromium, rt, known):
    # Given alice on the list of runs, refreshing every 2 seconds once she ticks the box (shown only with script)
    first = rt.submit(known, {"amount": 5}, initiator="user:alice", tenant="acme")
    ui.sign_in(chromium, served, ui.token(rt, "user:alice"))
    chromium.get(f"{served}/ui/runs?refresh=2")
    box = chromium.find_element(By.ID, "auto-refresh")
    assert box.is_displayed() and not box.is_selected()
    box.click()
    assert first in chromium.find_element(By.ID, "runs-body").text
    # When a run is submitted meanwhile, elsewhere
    second = rt.submit(known, {"amount": 6}, initiator="user:alice", tenant="acme")
    # Then it appears in her list, not reloaded by her
    ui.WebDriverWait(chromium, 20).until(lambda b: second in b.find_element(By.ID, "runs-body").text)
    # and the box stays ticked when she comes back to the list
    chromium.get(f"{served}/ui/runs?refresh=2")
    assert chromium.find_element(By.ID, "auto-refresh").is_selected()
