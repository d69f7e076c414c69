"""Opening PostgreSQL connections from a store URL, and the store's outage error.

A store URL is a libpq URL plus sealflow's own parameters (``schema``, ``clock``, ``migrate``,
``pool_max``), which are taken out before libpq sees it. Messages name the store with its password
masked.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from sealflow.store.errors import StoreError
from sealflow.store.errors import StoreUnavailable as StoreUnavailable  # re-exported

_OWN_PARAMS = ("schema", "clock", "migrate", "pool_max")


#: the libpq URL parameters that carry a credential: masked like the password of the user part
_SECRET_PARAMS = ("password", "sslpassword")


def _parts(url: str) -> SplitResult:
    try:
        return urlsplit(url)
    except ValueError:  # an unclosed IPv6 bracket: nothing of the URL is repeated, it may hold a password
        raise StoreError("the store URL is not a PostgreSQL URL a parser can read (an unclosed '[' of an IPv6 "
                         "host?); write postgresql://USER:PASSWORD@HOST:5432/DATABASE") from None


def mask(url: str) -> str:
    """``url`` without its password: the user part's and the ``password`` / ``sslpassword`` parameters'."""
    parts = _parts(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(k in _SECRET_PARAMS for k, _ in query):
        return urlunsplit(parts._replace(netloc=netloc, query="&".join(
            f"{k}=***" if k in _SECRET_PARAMS else urlencode([(k, v)]) for k, v in query)))
    return url if netloc == parts.netloc else urlunsplit(parts._replace(netloc=netloc))


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The libpq URL (sealflow's own parameters removed) and those parameters."""
    parts = _parts(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    return urlunsplit(parts._replace(query=urlencode(rest))), own


#: ``migrate=`` values, and what each means
_MIGRATE = {"": False, "0": False, "false": False, "no": False, "1": True, "true": True, "yes": True}
#: ``schema=``: a PostgreSQL identifier that reads the same quoted (as migrate creates it) and unquoted (as the
#: connection's search path names it): lower case, at most 63 characters
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: ``pool_max=``: connections a store's pool may open at most
POOL_MAX_RANGE = (1, 1000)


def own_params(own: dict[str, str], where: str) -> tuple[bool, int | None]:
    """Check sealflow's own URL parameters (``clock`` is checked by the store); ``(migrate, pool_max)``.
    A value that is not one of them is a :class:`StoreError` that names the parameter and what it takes."""
    migrate = own.get("migrate", "").lower()
    if migrate not in _MIGRATE:
        raise StoreError(f"PostgreSQL store {where}: migrate={own['migrate']!r}; use migrate=1 (apply missing "
                         "migrations on open) or leave it out")
    schema = own.get("schema")
    if schema is not None and not _SCHEMA.fullmatch(schema):
        raise StoreError(f"PostgreSQL store {where}: schema={schema!r} is not a schema name sealflow takes; "
                         "use lower-case letters, digits and underscores, starting with a letter or underscore "
                         "(at most 63)")
    pool_max = own.get("pool_max")
    if pool_max is None:
        return _MIGRATE[migrate], None
    low, high = POOL_MAX_RANGE
    if not pool_max.isdigit() or not low <= int(pool_max) <= high:
        raise StoreError(f"PostgreSQL store {where}: pool_max={pool_max!r}; use a whole number from {low} to "
                         f"{high} (connections per process; default 8)")
    return _MIGRATE[migrate], int(pool_max)


def conn_kwargs(own: dict[str, str]) -> dict[str, Any]:
    """psycopg connection options for sealflow's URL parameters (autocommit; ``schema`` as search path)."""
    kwargs: dict[str, Any] = {"autocommit": True}
    if own.get("schema"):
        kwargs["options"] = f"-c search_path={own['schema']}"
    return kwargs


def connect(conninfo: str, kwargs: dict[str, Any], where: str) -> psycopg.Connection:
    """One connection, or :class:`StoreUnavailable` naming the store ``where`` and the cause."""
    try:
        return psycopg.connect(conninfo, connect_timeout=10, **kwargs)
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot open PostgreSQL store {where}: {cause(exc)}{_hint(exc, conninfo)}") from None


def _hint(exc: BaseException, conninfo: str) -> str:
    """What to do about a connection refusal a newcomer meets first: the database was never created."""
    if "does not exist" not in str(exc) or 'database "' not in str(exc):
        return ""
    try:
        info = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return ""
    name = info.get("dbname")
    if not name:
        return ""
    args = [f"{flag} {info[key]}" for flag, key in (("-h", "host"), ("-p", "port"), ("-U", "user")) if info.get(key)]
    return f"; create it first (createdb {' '.join([*args, str(name)])}), then the schema (sealflow store migrate)"


def cause(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
