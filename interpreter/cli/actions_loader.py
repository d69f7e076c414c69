"""Import action modules named on the command line and describe their actions for the compiler."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sealflow.dsl.model import ActionInfo
    from sealflow.execution.actions import Action


class ActionsLoadError(Exception):
    """An --actions module or file could not be imported."""


def import_actions(specs: list[str] | tuple[str, ...]) -> None:
    """Import each spec: a dotted module name (``pkg.module``) or a path to a ``.py`` file."""
    for spec in specs:
        try:
            if spec.endswith(".py") or "/" in spec or Path(spec).suffix == ".py":
                path = Path(spec)
                if not path.is_file():
                    raise ActionsLoadError(f"--actions {spec}: no such file")
                name = "sealflow_actions_" + "_".join(path.resolve().with_suffix("").parts[-3:]).replace("-", "_")
                if name in sys.modules:
                    continue
                module_spec = importlib.util.spec_from_file_location(name, path)
                if module_spec is None or module_spec.loader is None:
                    raise ActionsLoadError(f"--actions {spec}: not a Python file")
                module = importlib.util.module_from_spec(module_spec)
                sys.modules[name] = module
                try:
                    module_spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[name]
                    raise
            else:
                importlib.import_module(spec)
        except ActionsLoadError:
            raise
        except SystemExit as exc:
            raise ActionsLoadError(f"--actions {spec}: the module called exit({exc.code})") from None
        except Exception as exc:  # any error while importing user code is reported, not raised
            where = ""
            tb = exc.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            if tb is not None:
                where = f" ({tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})"
            raise ActionsLoadError(f"--actions {spec}: cannot import: {type(exc).__name__}: {exc}{where}") from None


def load_actions(specs: list[str] | tuple[str, ...]) -> dict[str, ActionInfo]:
    """Import ``specs`` and return ``{name: sealflow.dsl.model.ActionInfo}`` for every registered action."""
    from sealflow.execution.actions import REGISTRY

    import_actions(specs)
    return {name: action_info(a) for name, a in REGISTRY.items()}


def action_info(act: Action) -> ActionInfo:
    """The compiler's :class:`~sealflow.dsl.model.ActionInfo` of a registered action: its effect, permissions,
    secrets, input and output schemas, and where it is defined (relative to the current folder if inside it)."""
    from sealflow.dsl.model import ActionInfo

    return ActionInfo(name=act.name, permissions=act.permissions, effect=act.effect,
                     honours_idempotency_key=act.honours_idempotency_key, input_schema=act.input_schema,
                     output_schema=act.output_schema, secrets=act.secrets, source=_source(act))


def _source(act: Action) -> str | None:
    from sealflow.core.tracebacks import shown_path
    from sealflow.execution.action_schema import source_of

    where = source_of(act.fn)
    if where is None:
        return None
    path, _, line = where.rpartition(":")
    return f"{shown_path(path)}:{line}"
