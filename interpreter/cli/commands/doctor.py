"""`sealflow doctor`: is this project ready to run its workflows here? One line per thing it reads.

It reads what every command of the project reads (``sealflow.yaml``, the store, the runtime configuration, the
access and trust policies, the action modules) and checks that every secret this process would need resolves:
the ``api_key`` of each configured model, each secret an action it loads declares, and the URL and signing
secret of each approval notification channel. A missing secret is named with where it is referenced and how to
set it, never a value. Exit 0 when ready, 1 when something is missing,
2 when a file cannot be read (the usual usage error, naming it). ``/readyz`` of ``sealflow serve`` makes the
same secret check (service/readiness.py).
"""

from __future__ import annotations

import json

import click

from sealflow.cli.options import access_option, actions_option, json_flag, store_option, trust_options
from sealflow.cli.session import open_runtime, project, project_actions, trust_path, trust_policy_problem


@click.command()
@actions_option
@store_option
@access_option
@trust_options
@json_flag(None)
def doctor(actions: tuple[str, ...], store_url: str | None, access_path: str | None, trust: str | None,
           bundle: str | None, pin_version: bool, as_json: bool) -> None:
    """Check that this project is ready here: project file, store, access and trust policies, actions, models,
    notification channels and the secrets they need. Exit 1 when a secret (or anything else) is missing."""
    from sealflow.policy.access import is_open
    from sealflow.runtime.readiness import describe_missing_secrets, missing_secrets

    found = project()
    rows: list[tuple[str, str, str]] = []  # (what, ok|note|missing, detail)
    rows.append(("project", "ok" if found else "note",
                 str(found.path) if found else "no sealflow.yaml here or above: the embedded default "
                                               "(`sealflow init` writes one)"))
    policy = trust_path(trust)
    # an unreadable or invalid trust policy (a key it names missing, as in a fresh clone whose .gitignore kept the
    # public key out) is a failed check, reported with the rest: no gate is built from it
    trust_problem = trust_policy_problem(policy) if policy else None
    with open_runtime(store_url, actions, access=access_path, trust=trust,
                      gate=trust_problem is None) as rt:  # a bad store, access policy or config exits 2, naming it
        rows.append(("store", "ok", getattr(rt.store, "url", None) or "sqlite (default)"))
        rows.append(("access policy", "note" if is_open(rt.access) else "ok",
                     "none: open development mode, everyone may do everything (access: in sealflow.yaml)"
                     if is_open(rt.access) else rt.access.describe()))
        if trust_problem is not None:
            rows.append(("trust policy", "missing", trust_problem))
        else:
            rows.append(("trust policy", "ok" if policy else "note",
                         policy or "none: development mode, unsigned definitions run (trust: in sealflow.yaml)"))
        modules = project_actions(actions)
        names = [name for name, act in rt.registry.items() if not act.fn.__module__.startswith("sealflow.demo")]
        rows.append(("actions", "ok", f"{len(names)} from {', '.join(modules)}" if modules
                     else "none of your own (the demo world's only; actions: in sealflow.yaml)"))
        models = sorted(rt.config.extra.get("models") or {})
        rows.append(("models", "ok", ", ".join(models) if models else "the local model only"))
        servers = sorted(rt.config.extra.get("mcp") or {})
        rows.append(("mcp servers", "ok", ", ".join(servers) if servers else "none (mcp: in sealflow.yaml)"))
        channels = sorted(rt.notify.channels)
        rows.append(("notifications", "ok", f"channels {', '.join(channels)}" if channels
                     else "no channels (notifications: in the runtime configuration)"))
        missing = missing_secrets(rt)
        if missing:
            rows += [("secret", "missing", line) for line in describe_missing_secrets(missing).splitlines()]
        else:
            rows.append(("secrets", "ok", "every secret the models, actions, MCP servers and notification channels "
                                          "need resolves"))
    ready = all(state != "missing" for _, state, _ in rows)
    if as_json:
        click.echo(json.dumps({"ready": ready, "checks": [{"what": w, "state": s, "detail": d} for w, s, d in rows]},
                              indent=2))
    else:
        for what, state, detail in rows:
            click.echo(f"{state:<8} {what:<14} {detail}")
        click.echo("ready" if ready else "not ready: provide what is missing above, then run `sealflow doctor` again")
    raise SystemExit(0 if ready else 1)


def register(group: click.Group) -> None:
    group.add_command(doctor)
