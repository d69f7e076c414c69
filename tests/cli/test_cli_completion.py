"""Shell completion of run ids (issue 14): `sealflow status <TAB>` offers the newest runs of the project's
store, through click's completion protocol as bash and zsh call it; never an error, never a file created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUCCEED = "sealflow: 1\nname: quick\nversion: 1\nowner: team:t\nsteps:\n  - id: done\n    succeed: {}\n"


def env_for(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEALFLOW_")}
    env.update({"PYTHONPATH": str(ROOT), "SEALFLOW_DEMO_DB": str(tmp_path / "demo.db")})
    return env


def complete(cwd: Path, words: str, shell: str = "bash", env: dict | None = None) -> subprocess.CompletedProcess:
    """What the shell's completion function gets back for the command line ``words`` (the cursor at its end)."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    return subprocess.run([sys.executable, "-m", "sealflow"], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**(env or env_for(cwd)), "_SEALFLOW_COMPLETE": f"{shell}_complete",
                               "COMP_WORDS": words, "COMP_CWORD": str(cword)})


@pytest.fixture
def project(tmp_path):
    """A project (sealflow.yaml, its store beside it) with three completed runs."""
    (tmp_path / "sealflow.yaml").write_text("sealflow: 1\n")
    (tmp_path / "quick.v1.yaml").write_text(SUCCEED)
    run_ids = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-m", "sealflow", "run", "quick.v1.yaml", "--detach"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, env=env_for(tmp_path))
        assert done.returncode == 0, done.stderr
        run_ids.append(done.stdout.strip())
    return tmp_path, run_ids


def test_run_ids_complete_from_the_project_store_newest_first(project):
    folder, run_ids = project
    # Given a project with three runs, When `sealflow status <TAB>` is completed from a folder below it
    (folder / "sub").mkdir()
    done = complete(folder / "sub", "sealflow status ")
    # Then the run ids are offered, newest first
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.split() == [f"plain,{r}" for r in reversed(run_ids)]
    # And a prefix narrows them; approve, cancel, audit and dlq show complete the same way
    assert complete(folder, f"sealflow approve {run_ids[0][:-2]}").stdout.split() == [f"plain,{run_ids[0]}"]
    for words in ("sealflow cancel ", "sealflow audit ", "sealflow dlq show ", "sealflow reject "):
        assert f"plain,{run_ids[1]}" in complete(folder, words).stdout.split(), words


def test_zsh_completion_shows_the_workflow_and_state_of_each_run(project):
    folder, run_ids = project
    done = complete(folder, "sealflow status ", shell="zsh")
    assert done.stdout.splitlines()[:3] == ["plain", run_ids[-1], "quick v1 queued"], done.stdout


def test_without_a_store_completion_offers_nothing_and_creates_nothing(tmp_path):
    # Given a folder with no project and no store, When a run id is completed
    done = complete(tmp_path, "sealflow status ")
    # Then nothing is offered, no error is printed, and no store folder was created
    assert done.returncode == 0 and done.stdout.strip() == "" and done.stderr == ""
    assert not (tmp_path / ".sealflow").exists()


def test_a_store_named_by_flag_is_the_one_completed_from(project, tmp_path_factory):
    folder, run_ids = project
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    done = complete(elsewhere, f"sealflow status --store sqlite:///{folder / '.sealflow' / 'state.db'} ")
    assert len(done.stdout.split()) == 3, done.stdout + done.stderr
