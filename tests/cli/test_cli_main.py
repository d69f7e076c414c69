"""The command line as a whole: the lazy command map, what `validate` never imports, and what main says of an
error that reaches it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "definitions" / "lead-qualification.v1.yaml")


def test_the_lazy_command_map_names_every_command_its_modules_register():
    import importlib

    import click

    from sealflow.cli import COMMANDS

    # Given each command module, when it registers its commands on a fresh group
    for module in set(COMMANDS.values()):
        group = click.Group()
        importlib.import_module(f"sealflow.cli.{module}").register(group)
        # then the lazy map sends exactly those names to that module
        assert set(group.commands) == {n for n, m in COMMANDS.items() if m == module}, module


def test_validate_does_not_import_the_runtime_or_signing():
    code = (f"import sys; from sealflow.cli import main; main(['validate', {EXAMPLE!r}]); "
            "print(sorted(m for m in sys.modules if m.startswith(('sealflow.runtime.facade', 'dramatiq', "
            "'sigstore', 'sealflow.cli.commands.runs', 'sealflow.cli.commands.worker'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_a_classified_refusal_that_reaches_main_is_an_error_never_an_internal_error(monkeypatch, capsys):
    import sealflow.cli as cli_module
    from sealflow.core.errors import StepError

    for error_class, code in (("invalid_request", 2), ("policy_denied", 1), ("internal", 1)):
        # Given a command whose runtime call raises a StepError of this class past the command's own handling
        def raising(*args, error_class=error_class, **kwargs):
            raise StepError(error_class, "what was wrong, and where")

        monkeypatch.setattr(cli_module.cli, "main", raising)
        # When main runs it
        got = cli_module.main(["status", "run_x"])
        err = capsys.readouterr().err
        # Then a refusal says what was wrong with its class; only an internal one is reported as a bug
        assert got == code
        if error_class == "internal":
            assert "internal error" in err
        else:
            assert err == f"sealflow: error: what was wrong, and where ({error_class})\n"
