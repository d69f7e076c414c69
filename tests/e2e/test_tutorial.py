"""docs/tutorial.md is true: follow it command by command in a temporary folder and compare the outputs it shows.

The tutorial's ``console`` blocks hold ``$ command`` lines, each followed by the output it documents
(stdout and stderr together, as a terminal shows them). A ``<!-- file: PATH -->`` line before a fenced block
means "write this block to PATH". Run ids, digests, key ids, times, durations and the home folder are
normalised before comparing; spacing is compared loosely (runs of spaces are one).

``python tests/e2e/test_tutorial.py --update`` rewrites the outputs in docs/tutorial.md from a fresh run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
SHOWN_HOME = "/home/ann"  # what the tutorial shows for the reader's home folder

FENCE = re.compile(r"^```(\w*)\s*$")
FILE_MARK = re.compile(r"^<!-- file: (\S+) -->\s*$")


@dataclass
class Step:
    kind: str  # "command" or "file"
    text: str  # the command, or the file's content
    path: str = ""
    expected: list[str] = field(default_factory=list)
    line: int = 0  # where the expected output starts in the tutorial (0-based), for --update
    end: int = 0


def parse(lines: list[str]) -> list[Step]:
    steps: list[Step] = []
    i = 0
    pending_file = None
    while i < len(lines):
        mark = FILE_MARK.match(lines[i])
        fence = FENCE.match(lines[i])
        if mark:
            pending_file = mark.group(1)
        elif fence and pending_file is not None:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            steps.append(Step("file", "".join(lines[i + 1:j]), path=pending_file))
            pending_file, i = None, j
        elif fence and fence.group(1) == "console":
            i += 1
            while not lines[i].startswith("```"):
                if lines[i].startswith("$ "):
                    step = Step("command", lines[i][2:].rstrip("\n"), line=i + 1)
                    i += 1
                    while not lines[i].startswith("```") and not lines[i].startswith("$ "):
                        step.expected.append(lines[i].rstrip("\n"))
                        i += 1
                    step.end = i
                    steps.append(step)
                else:
                    i += 1
        i += 1
    return steps


def normalise(text: str, home: str) -> list[str]:
    text = text.replace(home, SHOWN_HOME)
    text = re.sub(r"run_[0-9a-f]{28}", "run_ID", text)
    text = re.sub(r"sha256:[0-9a-f]{12,64}", "sha256:DIGEST", text)
    text = re.sub(r"\b[0-9a-f]{16,64}\b", "HEX", text)
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\+00:00|Z)?", "TIME", text)
    text = re.sub(r"\b\d+(\.\d)?(ms|s|m|h)(\d+(ms|s|m))?\b", "DUR", text)
    return [re.sub(r" +", " ", line.rstrip()) for line in text.splitlines() if line.strip()]


def environment(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEALFLOW_")}
    env.update(HOME=str(home), SEALFLOW_USER="ann", PYTHONUNBUFFERED="1", COLUMNS="200",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


def follow(workdir: Path):
    """Run the tutorial in ``workdir``; yield (step, actual output) for every command."""
    home = workdir / "home"
    home.mkdir()
    env = environment(home)
    cwd = workdir
    last_run = None
    for step in parse(TUTORIAL.read_text(encoding="utf-8").splitlines(keepends=True)):
        if step.kind == "file":
            (cwd / step.path).parent.mkdir(parents=True, exist_ok=True)
            (cwd / step.path).write_text(step.text, encoding="utf-8")
            continue
        command = step.text
        if last_run is not None:
            command = re.sub(r"run_[0-9a-f]{28}", last_run, command)
        if command.startswith("cd "):
            cwd = (cwd / command[3:].strip()).resolve()
            yield step, "", str(home), command
            continue
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=120)
        runs = re.findall(r"run_[0-9a-f]{28}", done.stdout)
        if runs:
            last_run = runs[0]
        yield step, done.stdout, str(home), command


def test_the_tutorial_does_what_it_says(tmp_path):
    # Given an empty folder outside any git work tree, When every command of docs/tutorial.md runs in turn
    for step, actual, home, _command in follow(tmp_path):
        # Then each prints what the tutorial shows
        assert normalise(actual, home) == normalise("\n".join(step.expected), home), \
            f"docs/tutorial.md line {step.line}: $ {step.text}\n--- actual:\n{actual}"


def update() -> None:  # pragma: no cover - a maintainer's tool
    import tempfile

    lines = TUTORIAL.read_text(encoding="utf-8").splitlines(keepends=True)
    replacements = []
    workdir = Path(tempfile.mkdtemp(prefix="sealflow-tutorial-"))
    try:
        for step, actual, home, command in follow(workdir):
            shown = actual.replace(home, SHOWN_HOME)
            replacements.append((step.line - 1, step.end, [f"$ {command}\n"] +
                                 [line + "\n" for line in shown.splitlines()]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for start, end, new in reversed(replacements):
        lines[start:end] = new
    TUTORIAL.write_text("".join(lines), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] == ["--update"]:
        update()
    else:
        sys.exit("usage: python tests/e2e/test_tutorial.py --update")
