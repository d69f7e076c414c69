"""The shipped deployment (tools/deploy/compose.yaml, tools/deploy/kubernetes/): the Kubernetes manifests pass
`kubernetes-validate --strict`, the compose file validates against the compose-spec JSON schema, every sealflow
command line in them parses with the real CLI, and what docs/deployment.md promises of them holds (workers'
graceful stop longer than --grace plus a lease's margin, a disruption budget, one scheduler, migrations as a Job,
secrets by reference, network policies)."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import click
import jsonschema
import kubernetes_validate
import pytest
import yaml

from sealflow.cli import cli
from sealflow.core.leases import LEASE_GRACE_MS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "tools" / "deploy"
#: the compose-spec JSON schema, as shipped by the npm package dclint 3.1.0 (tests/fixtures/compose-spec/README.md)
COMPOSE_SCHEMA = ROOT / "tests" / "fixtures" / "compose-spec" / "compose.schema.json"
IMAGE = "localhost/sealflow:0.1.0"


def manifests() -> list[dict]:
    return [doc for path in sorted((DEPLOY / "kubernetes").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def of_kind(kind: str) -> list[dict]:
    return [d for d in manifests() if d["kind"] == kind]


def pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def sealflow_command_lines() -> list[tuple[str, list[str]]]:
    """(where, arguments after `sealflow`) of every container running the sealflow image."""
    out = []
    for doc in manifests():
        if doc["kind"] in ("Deployment", "Job"):
            for c in pod_spec(doc)["containers"]:
                if c["image"] == IMAGE:
                    assert "command" not in c, "the image's entry point is sealflow: give args only"
                    out.append((f"{doc['kind']} {doc['metadata']['name']}", c["args"]))
    for name, service in compose()["services"].items():
        if service.get("image") == IMAGE:
            out.append((f"compose {name}", service["command"]))
    return out


def unparsed(ctx: click.Context) -> list[str]:
    """What a group's context left for its subcommand (click 8 splits it in two; click 9 keeps it in ``args``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return [*getattr(ctx, "protected_args", ()), *ctx.args]


def parse(args: list[str]) -> click.Context:
    """Parse ``sealflow ARGS`` with the real command tree, as the CLI would (types, choices, ranges and the
    options' own checks), without running the command; a usage error raises click's exception."""
    ctx = cli.make_context("sealflow", list(args))
    command: click.Command = cli
    while isinstance(command, click.Group):
        name, sub, rest = command.resolve_command(ctx, unparsed(ctx))
        assert sub is not None and name is not None
        ctx = sub.make_context(name, rest, parent=ctx)
        command = sub
    return ctx


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_every_kubernetes_manifest_passes_kubernetes_validate_strict():
    # Given every resource of tools/deploy/kubernetes
    docs = manifests()
    assert {d["kind"] for d in docs} >= {"Namespace", "Job", "Deployment", "Service", "PodDisruptionBudget",
                                         "NetworkPolicy"}
    # When each is validated against the Kubernetes schemas, rejecting unknown fields, Then all pass
    for doc in docs:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_the_validator_refuses_a_misspelt_field():
    # Given the worker Deployment with a field misspelt, When validated strictly, Then it is refused
    worker = copy.deepcopy(next(d for d in of_kind("Deployment") if d["metadata"]["name"] == "sealflow-worker"))
    pod_spec(worker)["terminationGracePeriodSecond"] = pod_spec(worker).pop("terminationGracePeriodSeconds")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(worker, kubernetes_validate.latest_version(), strict=True)


def test_the_compose_file_validates_against_the_compose_spec_schema():
    # Given the compose-spec schema and the compose file
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    # When the file is validated, Then it has no error
    assert [e.message for e in validator.iter_errors(compose())] == []
    # and a misspelt service key would have been one
    broken = compose()
    broken["services"]["server"]["comand"] = broken["services"]["server"].pop("command")
    assert any("comand" in e.message for e in validator.iter_errors(broken))


def test_the_compose_file_runs_the_whole_one_host_deployment():
    # Given the compose file, Then it runs PostgreSQL, Redis, the migration, two workers, the scheduler and the server
    services = compose()["services"]
    assert {"postgres", "redis", "migrate", "worker-1", "worker-2", "scheduler", "server"} <= set(services)
    commands = {name: s["command"][:1] for name, s in services.items() if s.get("image") == IMAGE}
    assert commands == {"migrate": ["store"], "worker-1": ["worker"], "worker-2": ["worker"],
                        "scheduler": ["scheduler"], "server": ["serve"]}


def test_every_sealflow_command_line_parses_with_the_real_cli():
    # Given every sealflow command line of the manifests and the compose file
    lines = sealflow_command_lines()
    assert len(lines) >= 9
    # When each is parsed by the CLI's own parser, Then none is a usage error
    for where, args in lines:
        try:
            parse(args)
        except click.ClickException as exc:
            pytest.fail(f"{where}: sealflow {' '.join(args)}: {exc.format_message()}")


def test_the_parse_check_refuses_a_wrong_option_or_value():
    # Given command lines with a misspelt option, a value out of range and an unknown command
    # When parsed, Then each is a usage error (the check above can fail)
    for args in (["worker", "--grase", "30"], ["worker", "--threads", "0"], ["serve", "--port", "x"],
                 ["store", "migrat"]):
        with pytest.raises(click.UsageError):
            parse(args)


def test_workers_stop_gracefully_longer_than_their_grace_and_a_steps_lease_margin():
    # Given the worker Deployment and the compose workers
    margin = LEASE_GRACE_MS / 1000
    (worker,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "sealflow-worker"]
    args = pod_spec(worker)["containers"][0]["args"]
    # Then Kubernetes waits longer than --grace plus a lease's margin before SIGKILL
    assert pod_spec(worker)["terminationGracePeriodSeconds"] > float(option(args, "--grace")) + margin
    # and so does compose
    for name in ("worker-1", "worker-2"):
        service = compose()["services"][name]
        stop = int(re.fullmatch(r"(\d+)s", service["stop_grace_period"]).group(1))
        assert stop > float(option(service["command"], "--grace")) + margin, name


def test_a_disruption_budget_keeps_a_worker_and_selects_the_worker_pods():
    (worker,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "sealflow-worker"]
    (pdb,) = of_kind("PodDisruptionBudget")
    labels = worker["spec"]["template"]["metadata"]["labels"]
    # Then its selector matches the worker pods, and at least one is kept
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] >= 1


def test_one_scheduler_migrations_as_a_job_and_secrets_by_reference():
    # Given the manifests
    (scheduler,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "sealflow-scheduler"]
    # Then the scheduler is one replica, never two during a rollout
    assert scheduler["spec"]["replicas"] == 1 and scheduler["spec"]["strategy"]["type"] == "Recreate"
    # and the schema is migrated by a Job running `sealflow store migrate`
    (job,) = of_kind("Job")
    assert pod_spec(job)["containers"][0]["args"][:2] == ["store", "migrate"]
    # and no Secret is in the files: every password comes from a secretKeyRef
    assert of_kind("Secret") == []
    for doc in of_kind("Deployment") + of_kind("Job"):
        for c in pod_spec(doc)["containers"]:
            for env in c.get("env", ()):
                if re.search(r"PASSWORD|SECRET|TOKEN", env["name"]):
                    assert "value" not in env and "secretKeyRef" in env["valueFrom"], (doc["metadata"]["name"], env)


def test_network_policies_deny_by_default_every_sealflow_pod():
    # Given the default-deny policy, Then it selects every Sealflow pod for both directions and allows nothing
    deny = next(p for p in of_kind("NetworkPolicy") if p["metadata"]["name"] == "sealflow-default-deny")
    assert set(deny["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    for doc in of_kind("Deployment") + of_kind("Job"):
        labels = doc["spec"]["template"]["metadata"]["labels"]
        assert deny["spec"]["podSelector"]["matchLabels"].items() <= labels.items(), doc["metadata"]["name"]


def test_pods_run_as_non_root_with_a_read_only_root_file_system():
    for doc in of_kind("Deployment") + of_kind("Job"):
        spec = pod_spec(doc)
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_example_project_they_mount_runs_its_workflow(tmp_path):
    # Given the example project the deployment mounts, named by SEALFLOW_PROJECT as in the manifests
    env = {**os.environ, "SEALFLOW_PROJECT": str(DEPLOY / "project" / "sealflow.yaml")}
    sealflow = str(Path(sys.executable).with_name("sealflow"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:  # (a process: its actions register there, not here)
        return subprocess.run([sealflow, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    # When its definitions are validated and hello runs on a store of its own, as a member of its access policy
    checked = run("validate", str(DEPLOY / "project" / "definitions"))
    ran = run("run", str(DEPLOY / "project" / "definitions" / "hello.v1.yaml"), "--input", '{"name": "ops"}',
              "--as", "user:ana", "--store", f"sqlite:///{tmp_path}/s.db")
    # Then both definitions validate and the run completes with the action's greeting
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert ran.returncode == 0 and 'output: "hello, ops"' in ran.stdout, ran.stdout + ran.stderr
