"""No silent field: every property of ``schemas/workflow.schema.json`` is honoured at run time, known to be
compile-time only, or refused at submit.

The walk collects every property (``<definition>.<property>``; the top level is ``workflow``). Each must be
in :data:`FIELDS` as one of:

* ``run("tests/...py::test_name")``: a runtime test that exercises it (the test must exist);
* ``compile_only("reason")``: it shapes the compiled plan, names or documents it, and has no run-time
  behaviour of its own;
* ``refused("why")``: this build cannot enforce it, so a plan using it is refused at submit
  (:data:`sealflow.runtime.honoured.NOT_YET`; the last test here checks the two agree, and
  ``tests/interpreter/runtime/test_honoured.py`` the refusal itself).

A new schema property fails the walk until it is placed here.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schemas" / "workflow.schema.json"

LOCKS = "tests/interpreter/engine/test_locks_pools.py::"
WAIT_EVENT = "tests/interpreter/runtime/test_wait_event.py::"
CALLBACK = "tests/interpreter/runtime/test_callbacks.py::"
EDIT = "tests/interpreter/runtime/test_edit_approve.py::"
CALL = "tests/interpreter/engine/test_call_runs.py::"
CALL_RUNS = CALL + "test_the_called_workflow_runs_as_a_child_with_its_own_input_and_its_output_is_the_steps"


def run(test: str) -> tuple[str, str]:
    return ("run", test)


def compile_only(reason: str) -> tuple[str, str]:
    return ("compile", reason)


def refused(reason: str) -> tuple[str, str]:
    return ("refused", reason)


FLOW = "tests/interpreter/engine/test_runtime_flow.py::"
FAIL = "tests/interpreter/engine/test_runtime_failures.py::"
APPR = "tests/interpreter/runtime/test_runtime_approvals.py::"
SAPPR = "tests/interpreter/policy/test_security_approvals.py::"
BUDG = "tests/interpreter/policy/test_security_budgets.py::"
AI = "tests/interpreter/steps/test_runtime_ai.py::"
AGENT = "tests/interpreter/steps/test_agent_steps.py::"
AGENT_GATES = "tests/interpreter/steps/test_agent_approvals.py::"
MCP = "tests/interpreter/steps/test_agent_mcp.py::"
OPTS = "tests/interpreter/steps/test_model_options.py::"
SAGA = "tests/interpreter/engine/test_security_saga.py::"
REAUTH = "tests/interpreter/policy/test_security_reauth.py::"
SCHED = "tests/interpreter/core/test_schedule.py::"
CORE = "tests/interpreter/core/test_core_units.py::"
AGENT_OPTIONS = OPTS + "test_given_an_agent_step_with_model_options_when_run_then_each_turn_carries_them"
RESOLVED = "resolved by the compiler into every step (or gate) it applies to; the steps' own fields are tested"
EVENTS = "tests/interpreter/runtime/telemetry/test_events.py::"
FAN = "tests/interpreter/engine/test_fanout_map.py::"

FIELDS: dict[str, tuple[str, str]] = {
    # -- the workflow --------------------------------------------------------------------------------
    "workflow.sealflow": compile_only("the language version; the compiler checks it"),
    "workflow.name": compile_only("the workflow's identity; stored with each run, no behaviour"),
    "workflow.version": compile_only("the workflow's version; stored with each run, no behaviour"),
    "workflow.description": compile_only("documentation"),
    "workflow.owner": compile_only("accountability metadata shown by `sealflow plan`; no run-time behaviour"),
    "workflow.permissions": run("tests/interpreter/runtime/test_security_submit.py::"
                                "test_a_member_missing_a_permission_is_refused_naming_it"),
    "workflow.priority": run("tests/interpreter/runtime/test_priority.py::"
                             "test_given_a_busy_worker_when_a_critical_run_comes_after_low_ones_then_it_starts_first"),
    "workflow.retry": compile_only("named retry classes; " + RESOLVED),
    "workflow.approvals": compile_only("approval defaults; " + RESOLVED),
    "workflow.defaults": compile_only(RESOLVED),
    "workflow.budget": run(BUDG + "test_a_loop_hits_max_steps_and_is_not_retried"),
    "workflow.input": run(FLOW + "test_invalid_input_is_refused_at_submit"),
    "workflow.output": run(FLOW + "test_succeed_ends_the_run_with_its_output_or_the_plans"),
    "workflow.steps": run(FLOW + "test_a_straight_run_completes_with_its_output"),
    "workflow.trigger": run("tests/e2e/test_scheduler.py::"
                            "test_given_a_slot_older_than_the_catch_up_window_when_fired_then_nothing_is_submitted"),
    "workflow.concurrency": run(LOCKS + "test_run_level_concurrency_holds_one_run_per_key_from_start_to_end"),
    "input.schema": run(FLOW + "test_invalid_input_is_refused_at_submit"),
    "defaults.retry": compile_only(RESOLVED),
    "defaults.timeout": compile_only(RESOLVED),
    "approvalDefaults.approvers": compile_only(RESOLVED),
    "approvalDefaults.quorum": compile_only(RESOLVED),
    "approvalDefaults.timeout": compile_only(RESOLVED),
    "budget.max_cost_usd": run(BUDG + "test_the_cost_budget_refuses_a_call_once_spent"),
    "budget.max_runtime": run(BUDG + "test_a_run_past_its_max_runtime_times_out_and_its_next_step_does_not_start"),
    "budget.max_steps": run(BUDG + "test_a_loop_hits_max_steps_and_is_not_retried"),
    "budget.max_tokens": run(BUDG + "test_a_call_that_went_over_the_token_budget_is_charged_and_fails_the_run"),
    "budget.max_tool_calls": run(AGENT + "test_the_run_budget_bounds_tool_calls_with_what_earlier_steps_used"),
    "runConcurrency.key": run(LOCKS + "test_run_level_concurrency_holds_one_run_per_key_from_start_to_end"),
    "runConcurrency.limit": run(LOCKS + "test_run_level_concurrency_holds_one_run_per_key_from_start_to_end"),
    "trigger.schedule": run("tests/e2e/test_scheduler.py::"
                            "test_given_a_slot_older_than_the_catch_up_window_when_fired_then_nothing_is_submitted"),
    "trigger.event": run(EVENTS + "test_a_signed_event_starts_the_definition_as_its_run_as"),
    "schedule.cron": run(SCHED + "test_given_a_time_after_a_slot_when_asked_then_the_latest_slot_is_in_the_"
                                 "schedules_zone"),
    "schedule.timezone": run(SCHED + "test_given_summer_time_when_the_next_slot_is_computed_then_the_local_hour_holds"),
    "schedule.run_as": run("tests/interpreter/runtime/test_security_submit.py::"
                           "test_a_scheduled_run_acts_as_its_run_as_service"),
    "event.source": run(EVENTS + "test_an_event_of_another_type_or_source_or_filtered_out_starts_nothing"),
    "event.type": run(EVENTS + "test_a_signed_event_starts_the_definition_as_its_run_as"),
    "event.filter": run(EVENTS + "test_an_event_of_another_type_or_source_or_filtered_out_starts_nothing"),
    "event.run_as": run(EVENTS + "test_a_signed_event_starts_the_definition_as_its_run_as"),
    "event.order": run(EVENTS + "test_an_out_of_order_sequence_is_recorded_and_not_run"),
    "eventOrder.key": run(EVENTS + "test_an_out_of_order_sequence_is_recorded_and_not_run"),
    "eventOrder.sequence": run(EVENTS + "test_an_out_of_order_sequence_is_recorded_and_not_run"),
    # -- steps ---------------------------------------------------------------------------------------
    "step.id": run(FLOW + "test_a_straight_run_completes_with_its_output"),
    "step.name": compile_only("a display name for people; no behaviour"),
    "step.description": compile_only("documentation"),
    "step.action": run(FLOW + "test_a_straight_run_completes_with_its_output"),
    "step.with": run("tests/interpreter/runtime/test_runtime_delivery.py::"
                     "test_an_idempotency_key_runs_the_effect_once_across_runs"),
    "step.ai": run(AI + "test_an_ai_step_renders_the_prompt_checks_the_output_and_counts_tokens"),
    "step.agent": run(AGENT + "test_an_agent_calls_allowed_tools_and_finishes_with_schema_valid_output"),
    "step.switch": run(FLOW + "test_switch_takes_the_first_true_branch_else_the_default"),
    "step.approval": run(APPR + "test_an_approval_waits_then_goes_on_when_approved"),
    "step.wait": run(FLOW + "test_a_long_wait_is_a_durable_timer_and_the_run_settles_waiting"),
    "step.set": run(FLOW + "test_set_evaluates_expressions_into_its_output"),
    "step.fail": run(FLOW + "test_fail_ends_the_run_with_its_class_and_rendered_message"),
    "step.succeed": run(FLOW + "test_succeed_ends_the_run_with_its_output_or_the_plans"),
    "step.when": run(FLOW + "test_when_false_skips_the_step_and_goes_on"),
    "step.timeout": run(FAIL + "test_a_blocking_action_times_out_and_its_late_return_changes_nothing"),
    "step.retry": run(FAIL + "test_retries_exhausted_fail_the_run_into_the_dead_letters"),
    "step.permissions": run(REAUTH + "test_a_permission_revoked_while_the_run_waits_denies_the_sensitive_step"),
    "step.reauthorize": run(REAUTH + "test_reauthorize_true_checks_any_step_and_false_opts_out"),
    "step.idempotency_key": run("tests/interpreter/runtime/test_runtime_delivery.py::"
                                "test_an_idempotency_key_runs_the_effect_once_across_runs"),
    "step.validate": run(FLOW + "test_validate_rules_fail_the_output_as_invalid_output"),
    "step.requires_approval_if": run(APPR + "test_requires_approval_if_true_holds_the_run_after_the_step"),
    "step.on_error": run(FAIL + "test_on_error_routes_after_retries_are_exhausted"),
    "step.compensate": run(SAGA + "test_a_run_that_fails_for_good_undoes_its_completed_steps_newest_first"),
    "step.concurrency": run(LOCKS + "test_a_pool_never_has_more_holders_than_its_limit"),
    "step.lock": run(LOCKS + "test_two_runs_holding_one_lock_never_overlap_and_tokens_grow"),
    "step.isolation": run("tests/interpreter/execution/test_isolation.py::"
                          "test_the_step_chooses_over_the_registration"),
    "step.circuit_breaker": run("tests/interpreter/engine/test_breakers.py::"
                                "test_given_two_runtimes_on_one_store_then_the_breaker_opens_half_opens_and_closes_for_both"),
    "step.budget": run(BUDG + "test_a_step_budget_fails_the_step_and_on_error_may_route_it"),
    "step.next": run(FLOW + "test_switch_without_a_match_or_default_goes_to_next"),
    "step.lint": compile_only("suppresses lint findings of the step; lint runs at compile time"),
    "lint.ignore": compile_only("lint runs at compile time"),
    "lint.reason": compile_only("lint runs at compile time"),
    "stepBudget.max_cost_usd": run(BUDG + "test_a_step_that_used_more_than_its_own_budget_fails"),
    "stepBudget.max_tokens": run(AGENT + "test_the_step_token_budget_stops_the_loop"),
    "stepBudget.max_tool_calls": run(AGENT + "test_the_step_budget_bounds_tool_calls"),
    # -- step kinds ----------------------------------------------------------------------------------
    "ai.model": run(AI + "test_an_ai_step_renders_the_prompt_checks_the_output_and_counts_tokens"),
    "ai.prompt": run(AI + "test_an_ai_step_renders_the_prompt_checks_the_output_and_counts_tokens"),
    "ai.system": run(AI + "test_an_ai_step_renders_the_prompt_checks_the_output_and_counts_tokens"),
    "ai.output_schema": run(AI + "test_output_still_failing_after_the_repair_is_invalid_output_and_retried"),
    "ai.max_tokens": run(AI + "test_an_ai_step_renders_the_prompt_checks_the_output_and_counts_tokens"),
    "ai.temperature": run(OPTS + "test_given_an_ai_step_with_a_temperature_when_run_then_the_request_carries_it"),
    "ai.fallback": run(AI + "test_fallback_models_are_tried_when_the_first_is_unavailable"),
    "promptInline.template": run(AI + "test_an_ai_step_renders_the_prompt_checks_the_output_and_counts_tokens"),
    "promptFile.id": compile_only("the compiler reads the prompt file into the plan's template and pins it"),
    "promptFile.version": compile_only("the compiler reads the prompt file into the plan's template and pins it"),
    "agent.model": run(AGENT + "test_an_agent_calls_allowed_tools_and_finishes_with_schema_valid_output"),
    "agent.goal": run(AGENT + "test_an_agent_calls_allowed_tools_and_finishes_with_schema_valid_output"),
    "agent.tools": run(AGENT + "test_a_tool_outside_the_allow_list_is_refused_and_not_executed"),
    "agent.mcp_tools": run(MCP + "test_a_locked_tool_is_called_and_its_result_framed_as_untrusted_data_and_audited"),
    "mcpTool.tool": run(MCP + "test_a_tool_changed_since_the_lock_is_refused_before_the_model_sees_any_tool"),
    "mcpTool.effect": run(MCP + "test_an_irreversible_tool_waits_for_approval_of_the_exact_call"),
    "mcpTool.permissions": run(MCP + "test_a_tool_needing_a_permission_the_step_lacks_is_withheld_and_refused"),
    "agent.system": run(AGENT + "test_an_agent_calls_allowed_tools_and_finishes_with_schema_valid_output"),
    "agent.max_steps": run(AGENT + "test_max_steps_exceeded_is_budget_exceeded"),
    "agent.approval_required": run(AGENT_GATES + "test_an_approved_call_runs_once_with_its_idempotency_key_and_"
                                   "the_loop_completes"),
    "agent.approval": run(AGENT_GATES + "test_a_quorum_needs_distinct_approvers_before_the_call_runs"),
    "agentApproval.approvers": run(AGENT_GATES + "test_an_approved_call_runs_once_with_its_idempotency_key_and_the_"
                                   "loop_completes"),
    "agentApproval.quorum": run(AGENT_GATES + "test_a_quorum_needs_distinct_approvers_before_the_call_runs"),
    "agentApproval.timeout": run(AGENT_GATES + "test_the_approval_timeout_fails_closed"),
    "agentApproval.separation_of_duties": run(AGENT_GATES + "test_the_initiator_cannot_approve_the_agents_call"),
    "agent.max_tool_calls": run(AGENT + "test_max_tool_calls_exceeded_is_budget_exceeded_and_the_extra_call_does_"
                                        "not_run"),
    "agent.max_tokens": run(AGENT_OPTIONS),
    "agent.temperature": run(AGENT_OPTIONS),
    "agent.output_schema": run(AGENT + "test_an_answer_failing_the_schema_is_invalid_output_and_retried"),
    "approval.approvers": run(SAPPR + "test_a_non_approver_is_refused_and_audited"),
    "approval.quorum": run(SAPPR + "test_a_quorum_of_two_needs_two_distinct_principals"),
    "approval.separation_of_duties": run(SAPPR + "test_the_initiator_cannot_approve_or_reject_their_own_run"),
    "approval.show": run(SAPPR + "test_a_show_payload_changed_after_an_approval_voids_it"),
    "approval.timeout": run(APPR + "test_an_unanswered_approval_times_out_and_rejects"),
    "approval.on_timeout": run(APPR + "test_on_timeout_next_routes_to_an_escalation_step"),
    "onTimeout.next": run(APPR + "test_on_timeout_next_routes_to_an_escalation_step"),
    "wait.for": run(FLOW + "test_a_short_wait_is_slept_through"),
    "wait.until": run(FLOW + "test_wait_until_accepts_epoch_seconds_and_iso_timestamps"),
    "approval.editable": run(EDIT + "test_an_approver_edits_the_draft_and_the_step_after_sends_the_edit"),
    "editable.schema": run(EDIT + "test_an_edit_failing_the_schema_is_refused_and_changes_nothing"),
    "step.callback": run(CALLBACK + "test_the_action_hands_out_a_url_and_token_and_the_posted_result_completes_the_"
                                    "step"),
    "callback.timeout": run(CALLBACK + "test_a_callback_that_never_comes_times_out_the_retry_gets_a_new_token_and_the_"
                                       "old_one_is_dead"),
    "callback.schema": run(CALLBACK + "test_a_result_failing_the_schema_is_refused_and_the_step_keeps_waiting"),
    "wait.event": run(WAIT_EVENT + "test_an_event_delivered_while_the_run_waits_is_taken_once_and_becomes_the_output"),
    "wait.source": run(WAIT_EVENT + "test_another_tenants_or_sources_event_is_never_taken"),
    "wait.match": run(WAIT_EVENT + "test_an_event_delivered_while_the_run_waits_is_taken_once_and_becomes_the_output"),
    "wait.schema": run(WAIT_EVENT + "test_a_matching_event_whose_data_fails_the_schema_is_refused_and_audited_and_the_"
                                    "run_keeps_waiting"),
    "wait.timeout": run(WAIT_EVENT + "test_no_event_within_the_timeout_fails_the_step_with_timeout_which_on_error_"
                                     "routes"),
    "fail.error": run(FLOW + "test_fail_ends_the_run_with_its_class_and_rendered_message"),
    "fail.message": run(FLOW + "test_fail_ends_the_run_with_its_class_and_rendered_message"),
    "succeed.output": run(FLOW + "test_succeed_ends_the_run_with_its_output_or_the_plans"),
    "switchBranch.when": run(FLOW + "test_switch_takes_the_first_true_branch_else_the_default"),
    "switchBranch.next": run(FLOW + "test_switch_takes_the_first_true_branch_else_the_default"),
    "validateRule.check": run(FLOW + "test_validate_rules_fail_the_output_as_invalid_output"),
    "validateRule.message": run(FLOW + "test_validate_rules_fail_the_output_as_invalid_output"),
    "onErrorRoute.errors": run(FAIL + "test_on_error_does_not_catch_other_classes"),
    "onErrorRoute.next": run(FAIL + "test_on_error_routes_after_retries_are_exhausted"),
    "compensate.action": run(SAGA + "test_a_run_that_fails_for_good_undoes_its_completed_steps_newest_first"),
    "compensate.with": run(SAGA + "test_a_run_that_fails_for_good_undoes_its_completed_steps_newest_first"),
    "compensate.retry": run(SAGA + "test_a_compensation_is_retried_by_its_class"),
    "compensate.timeout": run(SAGA + "test_a_compensation_past_its_timeout_is_timed_out_and_quarantines"),
    # -- fan-out (issue 15): child runs per item or branch ---------------------------------------------
    "step.map": run(FAN + "test_outputs_come_in_item_order_and_no_more_than_concurrency_items_run_at_once"),
    "step.parallel": run(FAN + "test_parallel_branches_all_run_and_give_their_outputs_in_branch_order"),
    "map.items": run(FAN + "test_items_see_item_index_and_the_steps_before_the_map"),
    "map.concurrency": run(FAN + "test_outputs_come_in_item_order_and_no_more_than_concurrency_items_run_at_once"),
    "map.max_items": run(FAN + "test_items_that_are_not_a_list_or_too_many_fail_the_step_as_invalid_request"),
    "map.tolerate_failures": run(FAN + "test_tolerated_failures_give_null_outputs_and_are_listed"),
    "map.steps": run(FAN + "test_items_see_item_index_and_the_steps_before_the_map"),
    "step.call": run(CALL_RUNS),
    "call.workflow": run(CALL_RUNS),
    "call.version": run(CALL + "test_a_trust_gated_worker_runs_only_the_child_its_caller_pins"),
    "call.input": run(CALL + "test_an_input_that_breaks_the_called_workflows_schema_fails_the_step_before_any_child"),
    "parallel.branches": run(FAN + "test_parallel_branches_all_run_and_give_their_outputs_in_branch_order"),
    "branch.steps": run(FAN + "test_parallel_branches_all_run_and_give_their_outputs_in_branch_order"),
    # -- retry classes and backoff -------------------------------------------------------------------
    "retryClass.on": run(FAIL + "test_a_class_not_listed_by_the_policy_is_not_retried"),
    "retryClass.max_attempts": run(FAIL + "test_retries_exhausted_fail_the_run_into_the_dead_letters"),
    "retryClass.backoff": run(FAIL + "test_a_retry_further_away_than_the_sleep_threshold_settles_the_drive"),
    "backoff.initial": run(CORE + "test_backoff_is_exponential_and_capped"),
    "backoff.factor": run(CORE + "test_backoff_is_exponential_and_capped"),
    "backoff.max": run(CORE + "test_backoff_is_exponential_and_capped"),
    "backoff.jitter": run(CORE + "test_jitter_full_and_equal_stay_within_their_bounds"),
    # -- references ----------------------------------------------------------------------------------
    "schemaRef.$ref": compile_only("the compiler inlines the referenced schema into the plan"),
    "schemaOrRef.$ref": compile_only("the compiler inlines the referenced schema into the plan"),
}


def schema_properties() -> set[str]:
    schema = json.loads(SCHEMA.read_text())
    found = {f"workflow.{k}" for k in schema.get("properties", {})}
    for name, node in schema["$defs"].items():
        stack = [node]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                found |= {f"{name}.{k}" for k in item.get("properties", {})}
                stack.extend(v for k, v in item.items() if k != "properties" and isinstance(v, (dict, list)))
            elif isinstance(item, list):
                stack.extend(item)
    return found


def test_given_the_workflow_schema_then_every_property_is_placed():
    # Given every property of the schema, then each one is placed in the table, and the table has no stale rows
    walked = schema_properties()
    missing = sorted(walked - set(FIELDS))
    stale = sorted(set(FIELDS) - walked)
    assert not missing, f"place these schema properties in FIELDS (a runtime test, or why compile-time): {missing}"
    assert not stale, f"these FIELDS rows name no schema property any more: {stale}"


@pytest.mark.parametrize("field", sorted(k for k, (how, _) in FIELDS.items() if how == "run"))
def test_given_a_runtime_field_then_the_test_it_names_exists(field):
    # Given the runtime test a field names, then that test function is defined in that file
    path, _, name = FIELDS[field][1].partition("::")
    tree = ast.parse((ROOT / path).read_text())
    names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert name in names, f"{field}: {path} has no test {name}"


def test_given_a_compile_time_field_then_it_says_why():
    for field, (how, reason) in FIELDS.items():
        if how == "compile":
            assert len(reason) > 10, field


def test_given_a_field_this_build_cannot_enforce_then_it_is_refused_at_submit_and_nothing_else_is():
    # Given the fields placed as refused, then exactly those are what the submit check refuses
    from sealflow.runtime.honoured import NOT_YET

    placed = {f for f, (how, _) in FIELDS.items() if how == "refused"}
    assert placed == set(NOT_YET), f"refused in FIELDS {sorted(placed)} but refused at submit {sorted(NOT_YET)}"
