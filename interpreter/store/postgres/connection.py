"""Opening PostgreSQL connections from a store URL, and the store's outage error.

A store URL is a libpq URL plus sealflow's own parameters (``schema``, ``clock``, ``migrate``,
``pool_max``), which are taken out before libpq sees it. Messages name the store with its password
masked.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from sealflow.interpreter.store.errors import StoreError, StoreUnavailable  # noqa: F401 - re-exported

_OWN_PARAMS = ("schema", "clock", "migrate", "pool_max")


def mask(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The libpq URL (sealflow's own parameters removed) and those parameters."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    return urlunsplit(parts._replace(query=urlencode(rest))), own


def conn_kwargs(own: dict[str, str]) -> dict:
    """psycopg connection options for sealflow's URL parameters (autocommit; ``schema`` as search path)."""
    kwargs: dict = {"autocommit": True}
    if own.get("schema"):
        kwargs["options"] = f"-c search_path={own['schema']}"
    return kwargs


def connect(conninfo: str, kwargs: dict, where: str) -> psycopg.Connection:
    """One connection, or :class:`StoreUnavailable` naming the store ``where`` and the cause."""
    try:
        return psycopg.connect(conninfo, connect_timeout=10, **kwargs)
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot open PostgreSQL store {where}: {cause(exc)}") from None


def cause(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
