"""Principals, roles and access providers: who holds which permissions and roles, per tenant.

Principals are ``user:NAME`` and ``service:NAME``; roles are ``role:NAME``. An
:class:`AccessProvider` answers two questions for a tenant and a principal:
which permissions it holds, which roles it holds (and, optionally, ``is_operator(principal)``:
whether the policy's top-level ``operators`` lists it). Three providers ship:

* :class:`FileAccess`: an access policy file (YAML, ``schemas/access-policy.schema.json``)::

      tenants:
        acme:
          roles: {buyer: [billing:charge, crm:read], finance: [billing:charge]}
          members: {user:alice: [buyer], user:bob: [finance]}
      operators: [user:root]     # optional: may operate every tenant's runs


  checked at every decision (stat, then a sha256 of the bytes when the stat
  cannot vouch for them), so an edit -- a revocation -- takes effect at the
  next check without a restart. A file that becomes unreadable or invalid
  denies everything until it is fixed (fail closed);
* :class:`PolicyAccess`: the same policy held in memory (tests, embedding);
* :class:`OpenAccess`: *open development mode*, used when no policy is
  configured on the embedded default: every principal holds every
  permission and every role. Runs record it (``access_mode``) and the
  command line says so on every command.

An external policy engine replaces them by implementing the protocol.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sealflow.core.errors import SealflowError

if TYPE_CHECKING:
    from sealflow.dsl.document import Document

PRINCIPAL = re.compile(r"^(user|service):[A-Za-z0-9][A-Za-z0-9._@+-]*$")
ROLE = re.compile(r"^role:[A-Za-z0-9][A-Za-z0-9._-]*$")
#: held by everyone in open development mode: every permission, every role
ALL = "*"
OPEN_DEVELOPMENT = "open-development"
POLICY = "policy"
SCHEMA = "access-policy.schema.json"

#: Diagnostic codes of access policy files (beyond the loader's Y and the schema's S codes).
ACCESS_CODES: dict[str, tuple[str, str]] = {
    "P801": ("error", "a member holds a role its tenant does not define"),
}


class AccessPolicyError(SealflowError):
    """The access policy cannot be used (unreadable or invalid); carries located diagnostics."""

    def __init__(self, message: str, diagnostics: list[Any] | None = None):
        super().__init__(message)
        self.message = message
        self.diagnostics = list(diagnostics or ())


class InvalidPrincipal(SealflowError, ValueError):
    """A principal is not ``user:NAME`` or ``service:NAME``."""


@runtime_checkable
class AccessProvider(Protocol):
    """Answers who holds what in a tenant. ``roles`` are ``role:NAME`` strings; ``ALL`` in either
    set means every permission (role). Implementations must be thread-safe and cheap: they are
    asked at every decision (submit, reauthorisation, approval)."""

    def permissions(self, tenant: str, principal: str) -> frozenset[str]: ...

    def roles(self, tenant: str, principal: str) -> frozenset[str]: ...

    def describe(self) -> str: ...


def mode_of(provider: AccessProvider) -> str:
    """``open-development`` or ``policy`` (a provider may say which with a ``mode`` attribute)."""
    return getattr(provider, "mode", POLICY)


def is_open(provider: AccessProvider) -> bool:
    return mode_of(provider) == OPEN_DEVELOPMENT


def check_principal(text: str) -> str:
    """``text`` if it is a principal (``user:NAME`` / ``service:NAME``), else :class:`InvalidPrincipal`."""
    if not isinstance(text, str) or not PRINCIPAL.fullmatch(text):  # fullmatch: `$` would let "\n" through
        raise InvalidPrincipal(f"{text!r} is not a principal; write user:NAME or service:NAME (e.g. user:alice)")
    return text


def holds(granted: Iterable[str], needed: str) -> bool:
    """Whether ``granted`` covers the permission ``needed``. A granted operation may be a wildcard
    (``crm:*`` covers ``crm:read``); a needed wildcard is covered only by a wildcard as broad."""
    granted = granted if isinstance(granted, (set, frozenset)) else frozenset(granted)
    if ALL in granted or needed in granted:
        return True
    resource, _, operation = needed.partition(":")
    for g in granted:
        g_resource, _, g_operation = g.partition(":")
        if "*" in g_operation and g_resource == resource and fnmatch.fnmatchcase(operation, g_operation):
            return True
    return False


def missing(granted: Iterable[str], needed: Iterable[str]) -> tuple[str, ...]:
    """The permissions of ``needed`` that ``granted`` does not cover, in order, once each."""
    granted = frozenset(granted)
    return tuple(dict.fromkeys(p for p in needed if not holds(granted, p)))


def has_role(roles: Iterable[str], role: str) -> bool:
    roles = roles if isinstance(roles, (set, frozenset)) else frozenset(roles)
    return ALL in roles or role in roles


# ---------------------------------------------------------------- providers

class OpenAccess:
    """Open development mode: every principal holds every permission and every role."""

    mode = OPEN_DEVELOPMENT
    _EVERYTHING = frozenset({ALL})

    def permissions(self, tenant: str, principal: str) -> frozenset[str]:
        return self._EVERYTHING

    def roles(self, tenant: str, principal: str) -> frozenset[str]:
        return self._EVERYTHING

    def is_operator(self, principal: str) -> bool:
        return True

    def describe(self) -> str:
        return ("open development mode: no access policy is configured, so every principal holds every "
                "permission and role; configure one with --access FILE or SEALFLOW_ACCESS")


@dataclasses.dataclass(frozen=True)
class TenantPolicy:
    roles: Mapping[str, frozenset[str]]  # role name -> permissions
    members: Mapping[str, frozenset[str]]  # principal -> role names


@dataclasses.dataclass(frozen=True)
class Policy:
    """A parsed access policy: tenant -> roles and members; ``operators`` may operate every tenant's runs
    (:mod:`sealflow.policy.operations`)."""

    tenants: Mapping[str, TenantPolicy]
    operators: frozenset[str] = frozenset()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        """A policy from plain data (already schema-valid); unknown roles of a member grant nothing."""
        tenants = {}
        for name, body in (data.get("tenants") or {}).items():
            body = body or {}
            roles = {r: frozenset(perms or ()) for r, perms in (body.get("roles") or {}).items()}
            members = {p: frozenset(rs or ()) for p, rs in (body.get("members") or {}).items()}
            tenants[name] = TenantPolicy(roles, members)
        return cls(tenants, frozenset(data.get("operators") or ()))

    def is_operator(self, principal: str) -> bool:
        return principal in self.operators

    def permissions(self, tenant: str, principal: str) -> frozenset[str]:
        t = self.tenants.get(tenant)
        if t is None:
            return frozenset()
        out: set[str] = set()
        for role in t.members.get(principal, ()):
            out |= t.roles.get(role, frozenset())
        return frozenset(out)

    def roles(self, tenant: str, principal: str) -> frozenset[str]:
        t = self.tenants.get(tenant)
        if t is None:
            return frozenset()
        return frozenset("role:" + r for r in t.members.get(principal, ()) if r in t.roles)


class PolicyAccess:
    """A fixed policy held in memory (``PolicyAccess({"tenants": {...}})``)."""

    mode = POLICY

    def __init__(self, policy: Policy | Mapping[str, Any]):
        self.policy = policy if isinstance(policy, Policy) else Policy.from_dict(policy)

    def permissions(self, tenant: str, principal: str) -> frozenset[str]:
        return self.policy.permissions(tenant, principal)

    def roles(self, tenant: str, principal: str) -> frozenset[str]:
        return self.policy.roles(tenant, principal)

    def is_operator(self, principal: str) -> bool:
        return self.policy.is_operator(principal)

    def describe(self) -> str:
        return f"in-memory access policy ({len(self.policy.tenants)} tenant(s))"


class FileAccess:
    """The access policy in a YAML file, re-read when it changes (see the module docstring).

    The stat (mtime, ctime, size, inode) is compared at each decision; when it is unchanged *and* the
    file was already older than :attr:`SETTLE_S` when last hashed, its bytes cannot have changed
    since and are not read again. Otherwise the bytes are read and hashed, and parsed again only
    when the hash differs. A file that cannot be read or parsed raises :class:`AccessPolicyError`
    at every decision until fixed: nothing is allowed meanwhile.
    """

    mode = POLICY
    SETTLE_S = 2.0

    def __init__(self, path: str | os.PathLike[str]):
        self.path = str(path)
        self._lock = threading.Lock()
        self._stat: tuple[Any, ...] | None = None
        self._stable = False
        self._digest: str | None = None
        self._policy: Policy | None = None
        self._error: AccessPolicyError | None = None
        self.loads = 0  # how many times the file was parsed (observability, tests)
        self.current()  # fail fast at start on a missing or invalid file

    @property
    def digest(self) -> str | None:
        """sha256 of the bytes of the policy in force."""
        return self._digest

    def current(self) -> Policy:
        """The policy in force now (re-read if the file changed); :class:`AccessPolicyError` if unusable."""
        with self._lock:
            try:
                st = os.stat(self.path)
            except OSError as exc:
                self._stat, self._stable, self._digest, self._policy = None, False, None, None
                raise AccessPolicyError(f"access policy {self.path} cannot be read ({exc.strerror or exc}); "
                                        "nothing is allowed until it is restored") from None
            key = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev)
            if key == self._stat and self._stable:
                if self._error is not None:
                    raise self._error
                return self._policy  # type: ignore[return-value]
            try:
                data = Path(self.path).read_bytes()
            except OSError as exc:
                raise AccessPolicyError(f"access policy {self.path} cannot be read ({exc.strerror or exc}); "
                                        "nothing is allowed until it is restored") from None
            self._stat = key
            self._stable = time.time() - st.st_mtime_ns / 1e9 > self.SETTLE_S
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            if digest != self._digest:
                self._digest = digest
                try:
                    self._policy, self._error = parse_access_policy_bytes(data, self.path), None
                except AccessPolicyError as exc:
                    self._policy, self._error = None, exc
                self.loads += 1
            if self._error is not None:
                raise self._error
            return self._policy  # type: ignore[return-value]

    def permissions(self, tenant: str, principal: str) -> frozenset[str]:
        return self.current().permissions(tenant, principal)

    def roles(self, tenant: str, principal: str) -> frozenset[str]:
        return self.current().roles(tenant, principal)

    def is_operator(self, principal: str) -> bool:
        return self.current().is_operator(principal)

    def describe(self) -> str:
        return f"access policy {self.path}" + (f" ({self._digest[:19]}...)" if self._digest else "")


# ---------------------------------------------------------------- loading

def _schema_diagnostics(doc: Document) -> list[Any]:
    from jsonschema import Draft202012Validator

    from sealflow import schemas
    from sealflow.dsl.schema_errors import SchemaErrorMapper

    schema = schemas.load(SCHEMA)
    return SchemaErrorMapper(doc, schema, subject="access policy").diagnostics(
        Draft202012Validator(schema).iter_errors(doc.data))


def _check(doc: Document) -> Policy:
    from sealflow.dsl.errors import Diagnostic

    diags = _schema_diagnostics(doc)
    if not diags:
        for tenant, body in (doc.data.get("tenants") or {}).items():
            roles = (body or {}).get("roles") or {}
            for principal, held in ((body or {}).get("members") or {}).items():
                for j, role in enumerate(held or ()):
                    if role not in roles:
                        pointer = ("tenants", tenant, "members", principal, j)
                        known = ", ".join(sorted(roles)) or "none"
                        diags.append(Diagnostic(
                            "P801", f"{principal} in tenant {tenant!r} holds role {role!r}, which the tenant does "
                                    "not define", doc.locate(pointer),
                            hint=f"define it under tenants.{tenant}.roles, or use one of: {known}",
                            pointer="/".join(map(str, pointer))))
    if diags:
        first = diags[0].format()
        more = f" (and {len(diags) - 1} more)" if len(diags) > 1 else ""
        raise AccessPolicyError(f"access policy {doc.path} is invalid: {first}{more}", diags)
    return Policy.from_dict(doc.data)


def _loaded(load: Callable[[], Document], path: str) -> Document:
    from sealflow.dsl.errors import DefinitionError

    try:
        return load()
    except DefinitionError as exc:
        raise AccessPolicyError(f"access policy {path} is invalid: {exc}", exc.diagnostics) from None


def load_access_policy(path: str | os.PathLike[str]) -> Policy:
    """Load and check an access policy file; :class:`AccessPolicyError` with every located problem."""
    from sealflow.dsl.loader import load_file

    return _check(_loaded(lambda: load_file(os.fspath(path)), str(path)))


def parse_access_policy_bytes(data: bytes, path: str = "<access policy>") -> Policy:
    from sealflow.dsl.loader import load_bytes

    return _check(_loaded(lambda: load_bytes(data, path), path))


def access_provider(path: str | os.PathLike[str] | None) -> AccessProvider:
    """The provider for a configured policy file, or open development mode when there is none."""
    return OpenAccess() if not path else FileAccess(path)


__all__ = [
    "AccessProvider", "AccessPolicyError", "InvalidPrincipal", "OpenAccess", "PolicyAccess", "FileAccess", "Policy",
    "TenantPolicy", "ACCESS_CODES", "ALL", "OPEN_DEVELOPMENT", "POLICY", "PRINCIPAL", "ROLE", "access_provider",
    "check_principal", "has_role", "holds", "is_open", "load_access_policy", "missing", "mode_of",
    "parse_access_policy_bytes",
]
