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
``[redacted:<name>]`` in what it records (outputs of actions that declared
secrets, error messages, dead-letter reasons, audit details) and in every log
record of the ``sealflow`` loggers (:class:`RedactingFilter`). Values shorter
than :data:`MIN_REDACT_LENGTH` characters are not redacted (they would mangle
ordinary text); do not use such secrets.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import types
from typing import Any, Iterable, Mapping, Protocol, runtime_checkable

from sealflow.interpreter.errors import StepError

ENV_PREFIX = "SEALFLOW_SECRET_"
DIR_ENV = "SEALFLOW_SECRETS_DIR"
MIN_REDACT_LENGTH = 4
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

    def __init__(self, directory: str | os.PathLike | None = None):
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

    def add(self, provider: SecretProvider) -> "SecretChain":
        self.providers.append(provider)
        return self

    def resolve(self, names: Iterable[str], *, redactor: "Redactor | None" = None) -> Mapping[str, str]:
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


# -- redaction -------------------------------------------------------------------------------------

class Redactor:
    """Remembers secret values seen in this process and blanks them out of text and JSON-like values."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pattern: re.Pattern | None = None

    @property
    def active(self) -> bool:
        return self._pattern is not None

    def remember(self, name: str, value: str) -> None:
        if not isinstance(value, str) or len(value) < MIN_REDACT_LENGTH or self._values.get(value) == name:
            return
        with self._lock:
            self._values[value] = name
            # longest first, so a secret containing another is replaced whole
            ordered = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
        install_log_filter()

    def forget_all(self) -> None:
        with self._lock:
            self._values.clear()
            self._pattern = None

    def text(self, value: str | None) -> str | None:
        pattern = self._pattern
        if pattern is None or not value:
            return value
        values = self._values
        return pattern.sub(lambda m: f"[redacted:{values.get(m.group(0), 'secret')}]", value)

    def value(self, value: Any) -> Any:
        """``value`` with every string inside redacted (maps, lists, tuples walked)."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.value(v) for v in value)
        return value

    def contains(self, text: str | None) -> bool:
        return bool(self._pattern is not None and text and self._pattern.search(text))


#: the process-wide redactor every resolved secret is remembered by
REDACTOR = Redactor()


def redact_commit(commit):
    """``commit`` (a :class:`~sealflow.interpreter.store.base.Commit`) with secret values blanked out of what it records."""
    red = REDACTOR
    if not red.active:
        return commit
    step, run, dead = commit.step, commit.run, commit.dead_letter
    changes: dict[str, Any] = {}
    if step is not None and (red.contains(step.error_message) or red.contains(step.output_json)
                             or (step.data and red.contains(repr(step.data)))):
        changes["step"] = dataclasses.replace(step, error_message=red.text(step.error_message),
                                              output_json=red.text(step.output_json),
                                              data=red.value(step.data) if step.data else step.data)
    if red.contains(run.error_message) or red.contains(run.output_json):
        changes["run"] = dataclasses.replace(run, error_message=red.text(run.error_message),
                                             output_json=red.text(run.output_json))
    if dead is not None and red.contains(dead.reason):
        changes["dead_letter"] = dataclasses.replace(dead, reason=red.text(dead.reason))
    if commit.ledger is not None and red.contains(commit.ledger.result_json):
        changes["ledger"] = dataclasses.replace(commit.ledger, result_json=red.text(commit.ledger.result_json))
    if commit.audit and any(e.detail and red.contains(repr(e.detail)) for e in commit.audit):
        changes["audit"] = tuple(dataclasses.replace(e, detail=red.value(e.detail)) if e.detail else e
                                 for e in commit.audit)
    return dataclasses.replace(commit, **changes) if changes else commit


class RedactingFilter(logging.Filter):
    """Blanks remembered secret values out of a log record (message, arguments and traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        red = REDACTOR
        if not red.active:
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is the handler's problem, not ours
            return True
        if red.contains(message):
            record.msg, record.args = red.text(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text and red.contains(record.exc_text):
            record.exc_text = red.text(record.exc_text)
        if record.exc_info and record.exc_info[1] is not None and red.contains(str(record.exc_info[1])):
            # handlers that format the exception again see only the redacted text
            record.exc_info = None
        return True


_FILTER = RedactingFilter()
#: loggers filtered even before anything logged through them
KNOWN_LOGGERS = ("sealflow", "sealflow.action", "sealflow.engine", "sealflow.actors", "sealflow.timeouts",
                 "sealflow.recovery", "sealflow.runtime", "sealflow.compensation")


def install_log_filter() -> None:
    """Attach :class:`RedactingFilter` to the ``sealflow`` logger and every ``sealflow.*`` logger known now.

    (A logger's filters do not apply to records of its children, so each gets it.) Called when a
    secret is first remembered and when a runtime starts.
    """
    manager = logging.Logger.manager
    names = list(KNOWN_LOGGERS) + [n for n in list(manager.loggerDict) if n.startswith("sealflow.")]
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def chain_for(config: Any = None) -> SecretChain:
    """The default provider chain: environment, then files (``secrets.dir`` or ``$SEALFLOW_SECRETS_DIR``)."""
    return SecretChain(directory=getattr(config, "secrets_dir", None))
