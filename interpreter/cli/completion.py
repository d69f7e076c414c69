"""Shell completion of run ids (``sealflow status <TAB>``, approve, reject, cancel, audit, dlq show|redrive).

click completes commands, options and files by itself (docs/project.md, "Shell completion"); this completes a
RUN argument from the store the command would open: ``--store`` if already typed, else ``$SEALFLOW_STORE``,
else the project's ``store:``, else ``.sealflow/state.db`` beside ``sealflow.yaml`` (or in this folder). Only a
SQLite store file that exists is read, read-only, newest runs first, at most :data:`LIMIT`; a PostgreSQL
store, a missing file or any error completes nothing, silently: completion never creates a file, migrates a
schema, prints an error or waits for a network.
"""

from __future__ import annotations

import os
from typing import Any

#: at most this many run ids are offered (the newest)
LIMIT = 50


def _store_file(ctx: Any) -> str | None:
    """The SQLite file of the store this command would open (None: not a local SQLite store)."""
    url = (ctx.params.get("store_url") if ctx is not None else None) or os.environ.get("SEALFLOW_STORE")
    if not url:
        from sealflow.cli.project import find, read

        root = ctx.find_root().obj if ctx is not None else None
        path = (root or {}).get("project_path") if isinstance(root, dict) else None
        chosen = path or os.environ.get("SEALFLOW_PROJECT") or find()
        found = read(chosen) if chosen else None
        url = (found.store or found.default_store) if found is not None else "sqlite:///.sealflow/state.db"
    if not url.startswith("sqlite:///"):
        return None
    return url[len("sqlite:///"):].split("?", 1)[0] or None


def run_ids(ctx: Any, param: Any, incomplete: str) -> list[Any]:
    """click's ``shell_complete`` for a RUN argument: the newest run ids starting with ``incomplete``, each
    with its workflow, version and state as help (shown by zsh and fish)."""
    from click.shell_completion import CompletionItem

    try:
        path = _store_file(ctx)
        if path is None or not os.path.isfile(path):
            return []
        import sqlite3
        from urllib.parse import quote

        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True, timeout=0.5)
        try:
            rows = conn.execute("SELECT id, workflow, workflow_version, state FROM runs WHERE id >= ? AND id < ? "
                                "ORDER BY created_at DESC LIMIT ?", (incomplete, incomplete + "\uffff", LIMIT))
            return [CompletionItem(r[0], help=f"{r[1]} v{r[2]} {r[3]}") for r in rows.fetchall()]
        finally:
            conn.close()
    except Exception:  # noqa: BLE001 - completion must never fail loudly: no store, a locked or foreign file
        return []
