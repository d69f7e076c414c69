"""axe-core in the browser tests: the npm package ``axe-core`` (pinned: :data:`AXE_VERSION`, MPL-2.0), installed
once per machine by ``npm`` into a cache folder (``$SEALFLOW_TEST_CACHE``, else ``~/.cache/sealflow-tests``), run
in the page a test is on; and the screenshots of the console's pages (docs/images/, when asked).

The script is given to the page by the driver (Chromium runs it whatever the page's Content-Security-Policy), so
nothing of it is served by Sealflow."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

AXE_VERSION = "4.14.1"
#: the impacts that fail a test (axe-core's: minor, moderate, serious, critical)
FAILING = ("serious", "critical")
#: where the screenshots go when ``SEALFLOW_UPDATE_SCREENSHOTS=1`` (else a test's own folder)
IMAGES = Path(__file__).resolve().parents[3] / "docs" / "images"


def axe_script() -> str:
    """The text of ``axe.min.js`` of :data:`AXE_VERSION`, installed with npm into the cache folder if absent."""
    cache = Path(os.environ.get("SEALFLOW_TEST_CACHE") or Path.home() / ".cache" / "sealflow-tests")
    where = cache / f"axe-core-{AXE_VERSION}"
    script = where / "node_modules" / "axe-core" / "axe.min.js"
    if not script.is_file():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("no npm to install axe-core with (apt-get install -y npm; .ci/run does)")
        where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(where),
                               f"axe-core@{AXE_VERSION}"], capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or not script.is_file():
            pytest.skip(f"npm could not install axe-core@{AXE_VERSION}: {done.stderr.strip()[-400:]}")
    return script.read_text(encoding="utf-8")


def violations(browser, script: str) -> list[dict]:
    """axe-core's serious and critical violations of the page the browser is on (WCAG 2.x A and AA, and best
    practices), each as ``{id, impact, help, targets}``."""
    browser.execute_script(script)
    browser.set_script_timeout(60)
    result = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations))"
        ".catch(e => done([{id: 'axe-error', impact: 'critical', help: String(e), nodes: []}]));")
    return [{"id": v["id"], "impact": v.get("impact"), "help": v.get("help"),
             "targets": [n.get("target") for n in v.get("nodes", ())][:5]}
            for v in result if v.get("impact") in FAILING]


def screenshot(browser, name: str, folder: Path) -> Path:
    """A PNG of the whole page the browser is on, as ``<name>.png`` in ``folder`` (docs/images/ when
    ``SEALFLOW_UPDATE_SCREENSHOTS=1``)."""
    target = IMAGES if os.environ.get("SEALFLOW_UPDATE_SCREENSHOTS") == "1" else folder
    target.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return Math.max(document.body.scrollHeight, 600)")
    browser.set_window_size(1280, min(int(height) + 120, 2400))
    path = target / f"{name}.png"
    browser.save_screenshot(str(path))
    browser.set_window_size(1280, 900)
    return path
