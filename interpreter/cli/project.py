"""The project file: ``sealflow.yaml``, found from the current folder upwards (or ``--project FILE``,
``$SEALFLOW_PROJECT``), so every command of one project uses the same store, runtime configuration, access
policy, trust policy, action modules and models without repeating flags.

.. code-block:: yaml

    sealflow: 1                 # the project file's format
    store: sqlite:///.sealflow/state.db
    config: sealflow.config.yaml   # the runtime configuration (tenant limits, secrets, pools, ...)
    access: access.yaml         # the access policy
    trust: trust.yaml           # the trust policy (runs execute only definitions it verifies)
    actions: [actions/hello.py] # action modules: .py files or dotted names (importable from the project root)
    models: {}                  # the models: section of the runtime configuration, if that file has none
    mcp:                        # MCP servers whose tools agents may use, pinned in sealflow.mcp.lock beside this file
      time: {command: mcp-server-time, args: ["--local-timezone", "UTC"], timeout: 10s}

Relative paths are relative to the folder of ``sealflow.yaml``. Precedence, highest first: a flag, its
``SEALFLOW_*`` environment variable, ``sealflow.yaml``, the built-in default (docs/project.md). ``--actions``
adds to the project's ``actions:``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

NAME = "sealflow.yaml"
KEYS = ("sealflow", "store", "config", "access", "trust", "actions", "models", "mcp")


class ProjectError(Exception):
    """The project file cannot be read or is not valid: the message says where and what."""


@dataclasses.dataclass(frozen=True)
class Project:
    """A read ``sealflow.yaml``: every path absolute."""

    path: Path
    store: str | None = None
    config: str | None = None
    access: str | None = None
    trust: str | None = None
    actions: tuple[str, ...] = ()
    models: dict[str, Any] | None = None
    #: the ``mcp:`` section as written (checked when read: :func:`sealflow.execution.mcp.servers.parse_servers`)
    mcp: dict[str, Any] | None = None

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def default_store(self) -> str:
        """The store when none is named: ``.sealflow/state.db`` beside ``sealflow.yaml``."""
        return f"sqlite:///{self.root / '.sealflow' / 'state.db'}"

    @property
    def mcp_lock(self) -> Path:
        """Where ``sealflow mcp lock`` writes the pinned MCP tools: ``sealflow.mcp.lock`` beside this file."""
        return self.root / "sealflow.mcp.lock"


def find(start: str | os.PathLike[str] | None = None) -> Path | None:
    """``sealflow.yaml`` in ``start`` (default: the current folder) or the nearest folder above it."""
    here = Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / NAME
        if candidate.is_file():
            return candidate
    return None


def _path(value: Any, key: str, root: Path, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ProjectError(f"{where}: {key}: must be a file path (relative to {root})")
    return str((root / value).resolve()) if not os.path.isabs(value) else value


def _store(value: Any, root: Path, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or "://" not in value:
        raise ProjectError(f"{where}: store: must be a store URL such as sqlite:///.sealflow/state.db or "
                           "postgresql://host/db")
    prefix = "sqlite:///"
    if value.startswith(prefix) and not value[len(prefix):].startswith("/"):
        return prefix + str((root / value[len(prefix):]).resolve())
    return value


def _action(spec: Any, root: Path, where: str) -> str:
    if not isinstance(spec, str) or not spec.strip():
        raise ProjectError(f"{where}: actions: each entry must be a .py file or a dotted module name")
    if spec.endswith(".py") or "/" in spec:
        return str((root / spec).resolve())
    return spec


def read(path: str | os.PathLike[str]) -> Project:
    """Read and check the project file at ``path``; :class:`ProjectError` says what is wrong and where."""
    import yaml

    path = Path(path).resolve()
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except OSError as exc:
        raise ProjectError(f"cannot read the project file {where}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise ProjectError(f"{where}{at}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise ProjectError(f"{where}: must be a map with the keys {', '.join(KEYS)}")
    unknown = [k for k in data if k not in KEYS]
    if unknown:
        import difflib

        close = difflib.get_close_matches(str(unknown[0]), KEYS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f"; the keys are {', '.join(KEYS)}"
        raise ProjectError(f"{where}: unknown key {unknown[0]!r}{hint}")
    if data.get("sealflow", 1) != 1:
        raise ProjectError(f"{where}: sealflow: {data['sealflow']!r} is not a project format this version reads "
                           "(1)")
    root = path.parent
    actions = data.get("actions") or []
    if isinstance(actions, str):
        actions = [actions]
    if not isinstance(actions, list):
        raise ProjectError(f"{where}: actions: must be a list of .py files or dotted module names")
    models = data.get("models")
    if models is not None and not isinstance(models, dict):
        raise ProjectError(f"{where}: models: must be a map, as the runtime configuration's models: section "
                           "(docs/models.md)")
    mcp = data.get("mcp")
    if mcp is not None:
        _check_mcp(mcp, path, text)
    return Project(path=path, store=_store(data.get("store"), root, where),
                   config=_path(data.get("config"), "config", root, where),
                   access=_path(data.get("access"), "access", root, where),
                   trust=_path(data.get("trust"), "trust", root, where),
                   actions=tuple(_action(a, root, where) for a in actions), models=models, mcp=mcp)


def _check_mcp(mcp: Any, path: Path, text: str) -> None:
    """The ``mcp:`` section's servers, checked now: an error names ``file:line:column`` of the bad value."""
    from sealflow.core.errors import ConfigError
    from sealflow.execution.mcp.servers import parse_servers

    try:
        parse_servers(mcp, locate=lambda keys: f"{path}{_position(text, keys)}")
    except ConfigError as exc:
        raise ProjectError(str(exc)) from None


def _position(text: str, keys: tuple[str, ...]) -> str:
    """``:line:column`` of the value at ``keys`` in the YAML ``text`` (of its nearest parent that exists)."""
    import yaml

    node: Any = yaml.compose(text)
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        found = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
        if found is None:
            break
        node = found
    mark = node.start_mark if node is not None else None
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
