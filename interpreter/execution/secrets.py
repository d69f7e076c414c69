"""Secrets: resolved when an action runs, never stored, redacted wherever they could leak.

An action declares the secrets it needs, by name::

    @action("crm.sync", secrets=["crm_api_key"])
    def sync(ctx, ...):
        token = ctx.secrets["crm_api_key"]

Right before the attempt runs, each name is resolved through a chain of
:class:`SecretProvider` (first answer wins):

1. :class:`EnvSecrets`: ``SEALFLOW_SECRET_<NAME>`` (the name upper-cased, any
   character other than a letter or digit as ``_``: ``crm_api_key`` ->
   ``SEALFLOW_SECRET_CRM_API_KEY``);
2. :class:`FileSecrets`: the file ``<dir>/<name>`` (one trailing newline
   stripped), ``dir`` from the runtime configuration ``secrets.dir`` or
   ``SEALFLOW_SECRETS_DIR`` (Docker/Kubernetes secret mounts);

and any provider of your own (a vault client) appended with
:meth:`SecretChain.add`. The action gets them as ``ctx.secrets``, a read-only
mapping holding exactly what it declared. A secret no provider knows fails the
step with ``configuration``, naming the secret and where it was looked for
(never a value).

Values never reach definitions (they name actions, not secrets), messages
(ids only), the store or the audit trail: every value resolved in this process
is remembered by :data:`REDACTOR`, and the engine replaces it with
``[redacted:<name>]`` in what it records (step and run outputs, error messages and tracebacks,
dead-letter reasons, ledger entries, attempt data, audit details), in every
log record of the process, whichever logger made it (:func:`install_log_filter`), and in what a process that
runs actions prints (:mod:`sealflow.core.redacted_output`), in every
form it takes once written (JSON- and repr-escaped, base64: see
:mod:`sealflow.core.redaction`). Values shorter than
:data:`MIN_REDACT_LENGTH` characters are not redacted (they would mangle
ordinary text); do not use such secrets.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sealflow.core.errors import StepError
from sealflow.core.redaction import (  # re-exported: the secrets API (__all__)
    KNOWN_LOGGERS,
    MIN_REDACT_LENGTH,
    REDACTOR,
    RedactingFilter,
    Redactor,
    install_log_filter,
)

if TYPE_CHECKING:
    from sealflow.store.base import Commit

__all__ = ["ENV_PREFIX", "DIR_ENV", "SecretProvider", "env_name", "EnvSecrets", "FileSecrets", "SecretChain",
           "redact_commit", "chain_for", "KNOWN_LOGGERS", "MIN_REDACT_LENGTH", "REDACTOR", "RedactingFilter",
           "Redactor", "install_log_filter"]

ENV_PREFIX = "SEALFLOW_SECRET_"
DIR_ENV = "SEALFLOW_SECRETS_DIR"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


@runtime_checkable
class SecretProvider(Protocol):
    """Where secret values come from. ``get`` returns None when it does not hold ``name``."""

    def get(self, name: str) -> str | None: ...

    def describe(self) -> str:
        """Where it looks, for error messages (no values)."""
        ...


def env_name(name: str) -> str:
    return ENV_PREFIX + _NOT_ALNUM.sub("_", name).upper()


class EnvSecrets:
    """``SEALFLOW_SECRET_<NAME>`` environment variables."""

    def __init__(self, environ: Mapping[str, str] | None = None):
        self._environ = environ

    def get(self, name: str) -> str | None:
        env = os.environ if self._environ is None else self._environ
        return env.get(env_name(name))

    def describe(self) -> str:
        return f"environment variable {ENV_PREFIX}<NAME>"


class FileSecrets:
    """One file per secret in a directory (``None``: ``$SEALFLOW_SECRETS_DIR``, read at each lookup)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None):
        self._dir = None if directory is None else os.fspath(directory)

    @property
    def directory(self) -> str | None:
        return self._dir if self._dir is not None else os.environ.get(DIR_ENV)

    def get(self, name: str) -> str | None:
        base = self.directory
        if not base:
            return None
        path = os.path.join(base, name)
        try:
            with open(path, encoding="utf-8") as fh:
                value = fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StepError("configuration", f"secret {name!r}: cannot read its file in {base}: "
                                             f"{exc.strerror or type(exc).__name__}") from None
        return value[:-1] if value.endswith("\n") else value

    def describe(self) -> str:
        return f"file {self.directory}/<name>" if self.directory else f"files in ${DIR_ENV} (not set)"


class SecretChain:
    """Providers asked in order; the first that holds a name answers."""

    def __init__(self, providers: Iterable[SecretProvider] | None = None, *, directory: str | None = None):
        self.providers: list[SecretProvider] = list(providers) if providers is not None else \
            [EnvSecrets(), FileSecrets(directory)]

    def add(self, provider: SecretProvider) -> SecretChain:
        self.providers.append(provider)
        return self

    def resolve(self, names: Iterable[str], *, redactor: Redactor | None = None) -> Mapping[str, str]:
        """A read-only mapping of every name to its value; ``configuration`` for one no provider holds."""
        red = REDACTOR if redactor is None else redactor
        found: dict[str, str] = {}
        for name in names:
            if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
                raise StepError("configuration", f"secret name {name!r} is not valid; use letters, digits, '_', "
                                                 "'.' and '-'")
            value = None
            for provider in self.providers:
                value = provider.get(name)
                if value is not None:
                    break
            if value is None:
                where = "; ".join(p.describe() for p in self.providers)
                raise StepError("configuration", f"secret {name!r} is not configured (looked in: {where}); "
                                                 f"set {env_name(name)} or add the file {name!r}")
            red.remember(name, value)
            found[name] = value
        return types.MappingProxyType(found)


# -- redaction (core.redaction) and commits ------------------------------------------------------

def redact_commit(commit: Commit) -> Commit:
    """``commit`` (a :class:`~sealflow.store.base.Commit`) with secret values blanked out of what
    it records: JSON (outputs, ledger results) leaf by leaf and then as text, structures (attempt data,
    audit details) leaf by leaf, messages as text, in every form a secret takes (see
    :mod:`sealflow.core.redaction`)."""
    red = REDACTOR
    if not red.active:
        return commit
    step, run, dead, nxt = commit.step, commit.run, commit.dead_letter, commit.next
    changes: dict[str, Any] = {}
    if step is not None:
        fields: dict[str, Any] = {
            "error_message": red.text(step.error_message), "error_trace": red.text(step.error_trace),
            "output_json": red.json_text(step.output_json), "data": red.value(step.data) if step.data else step.data}
        if any(value is not getattr(step, key) for key, value in fields.items()):
            changes["step"] = dataclasses.replace(step, **fields)
    error, output = red.text(run.error_message), red.json_text(run.output_json)
    if error is not run.error_message or output is not run.output_json:
        changes["run"] = dataclasses.replace(run, error_message=error, output_json=output)
    if nxt is not None and nxt.data and red.value(nxt.data) is not nxt.data:
        changes["next"] = dataclasses.replace(nxt, data=red.value(nxt.data))
    if dead is not None and red.contains(dead.reason):
        changes["dead_letter"] = dataclasses.replace(dead, reason=red.text(dead.reason))
    if commit.ledger is not None and red.contains(commit.ledger.result_json):
        changes["ledger"] = dataclasses.replace(commit.ledger, result_json=red.json_text(commit.ledger.result_json))
    if commit.audit:
        details = [red.value(e.detail) if e.detail else e.detail for e in commit.audit]
        if any(d is not e.detail for d, e in zip(details, commit.audit, strict=True)):
            changes["audit"] = tuple(dataclasses.replace(e, detail=d) for d, e in zip(details, commit.audit,
                                                                                      strict=True))
    return dataclasses.replace(commit, **changes) if changes else commit


def chain_for(config: Any = None) -> SecretChain:
    """The default provider chain: environment, then files (``secrets.dir`` or ``$SEALFLOW_SECRETS_DIR``)."""
    return SecretChain(directory=getattr(config, "secrets_dir", None))
