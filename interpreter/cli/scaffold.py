"""The files ``sealflow init`` writes: a project that runs at once (see :mod:`sealflow.cli.commands.init`)."""

from __future__ import annotations

PROJECT = """\
# The Sealflow project: every sealflow command run in this folder (or below) reads it, so run, approve,
# recover, worker and serve use the same store, policies and actions without flags. A flag or its
# SEALFLOW_* environment variable overrides a line here (docs/project.md). Paths are relative to this file.
sealflow: 1
store: sqlite:///.sealflow/state.db
access: access.yaml
actions: [actions/hello.py]
# config: sealflow.config.yaml   # the runtime configuration: tenant limits, secrets, pools
# trust: trust.yaml              # run only definitions signed by a trusted key (docs/trust.md)
# models: {}                     # the models: section, when no runtime configuration names them (docs/models.md)
"""

DEFINITION = """\
# hello v1: greets someone through the project's own action (actions/hello.py).
sealflow: 1
name: hello
version: 1
owner: team:{user}
description: Greet someone.
input:
  schema:
    type: object
    required: [name]
    properties: {{name: {{type: string, minLength: 1}}}}
steps:
  - id: greet
    action: hello.greet
    with: {{name: "${{{{ input.name }}}}"}}
  - id: done
    succeed: {{output: "${{{{ steps.greet.output.greeting }}}}"}}
"""

TEST = """\
# hello's tests: `sealflow test` runs every case on the real engine, in virtual time (docs/testing.md).
sealflow_test: 1
definition: ../hello.v1.yaml
cases:
  - name: greets by name
    input: {name: Ada}
    expect:
      state: completed
      output: "hello, Ada"
      effects: {hello.greet: 1}

  - name: the greeter is unavailable once, and the run fails (hello declares no retry class)
    input: {name: Ada}
    faults:
      - {step: greet, error: unavailable}
    expect:
      state: failed
      error: unavailable

  - name: an empty name is refused before anything runs
    input: {name: ""}
    expect:
      state: refused
"""

ACTIONS = '''\
"""The project's actions: each @action is a step a definition may name (docs/runtime.md)."""

from typing import TypedDict

from sealflow import action


class Greeting(TypedDict):
    greeting: str


@action("hello.greet", effect="read")
def greet(ctx, name: str) -> Greeting:
    """Return a greeting for ``name``.

    Args:
        name: who to greet
    """
    return {"greeting": f"hello, {name}"}
'''

ACCESS = """\
# Who may do what (docs/security.md). {principal} is a member, so the scaffold runs at once, and may read
# and redrive the project's dead letters (dlq list/show/redrive); user:reviewer decides approvals (nobody
# approves their own run).
tenants:
  default:
    roles:
      developer: ["runs:read", "audit:read", "dlq:read", "dlq:redrive"]
      reviewer: ["runs:read"]
    members:
      {principal}: [developer]
      user:reviewer: [reviewer]
"""

GITIGNORE = """\
# Sealflow: local state and private keys never enter the repository. A public key (PREFIX.pub.pem, what
# trust.yaml names) must: a clone without it cannot verify anything (sealflow doctor says so).
.sealflow/
*.pem
*.key
!*.pub.pem
"""

VSCODE_SETTINGS = """\
{
  "yaml.schemas": {
    "./.vscode/sealflow.schema.json": ["definitions/*.yaml", "definitions/**/*.yaml"]
  }
}
"""

CI = """\
# Sealflow checks for every pull request that changes the project (validate and lint the definitions with
# the project's actions). The full template with the security diff and review gate: tools/ci/ in Sealflow.
name: sealflow checks

on:
  pull_request:
    paths: ["definitions/**", "actions/**", "sealflow.yaml", "access.yaml", "trust.yaml", "**/*.pub.pem",
            ".github/workflows/sealflow.yml"]

permissions:
  contents: read

env:
  # What to install, pinned: FILL THIS IN (a git URL at a reviewed commit, or a wheel you keep).
  SEALFLOW_PACKAGE: ""

jobs:
  check:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
        with:
          persist-credentials: false
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install sealflow
        run: |
          if [ -z "$SEALFLOW_PACKAGE" ]; then
            echo "::error::set SEALFLOW_PACKAGE at the top of this workflow to the Sealflow release you trust"
            exit 1
          fi
          python -m pip install --disable-pip-version-check "$SEALFLOW_PACKAGE"
      - name: Validate
        run: sealflow validate definitions/ --format github
      - name: Lint
        run: sealflow lint definitions/ --format github
      - name: Test
        run: sealflow test definitions/tests
"""


def files(principal: str) -> dict[str, str]:
    """Relative path -> text of every file ``sealflow init`` writes, for ``principal`` (user:NAME)."""
    user = principal.split(":", 1)[1] or "me"
    return {
        "sealflow.yaml": PROJECT,
        "definitions/hello.v1.yaml": DEFINITION.format(user=user),
        "definitions/tests/hello.test.yaml": TEST,
        "actions/hello.py": ACTIONS,
        "access.yaml": ACCESS.format(principal=principal),
        ".gitignore": GITIGNORE,
        ".github/workflows/sealflow.yml": CI,
        ".vscode/settings.json": VSCODE_SETTINGS,
    }
