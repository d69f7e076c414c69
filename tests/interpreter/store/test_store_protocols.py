"""The store's protocols by aggregate (interpreter/store/base.py PROTOCOLS): each narrow (no more than 25
methods), `Store` only their composition, the server's state outside it, and both backends satisfying every
protocol (mypy checks the same at the type level: sealflow.testing.conformance.backends)."""

from __future__ import annotations

import pytest

from sealflow.store.base import AGGREGATES, PROTOCOLS, Store, methods
from sealflow.store.errors import StoreError
from sealflow.store.serverstate import ServerStore, server_store
from sealflow.testing.conformance import protocol_gaps

#: the most methods one store protocol may declare
MOST = 25
#: what the server keeps and the runtime's Store must not carry
SERVER_ONLY = {"create_api_token", "api_token", "api_tokens", "revoke_api_token", "session_put", "session_get",
               "session_end", "oidc_login_put", "oidc_login_spend", "server_sweep"}


class NoTokens:
    """A store-like object without the server's state."""

    url = "memory://none"


def test_given_every_store_protocol_then_none_declares_more_than_25_methods():
    # Given every store protocol (the runtime's aggregates and the server's store)
    sizes = {p.__name__: len(methods(p)) for p in PROTOCOLS}
    # Then each is narrow, and each declares something
    assert all(0 < size <= MOST for size in sizes.values()), sizes


def test_given_the_runtime_store_then_it_is_the_composition_of_its_aggregates_and_nothing_more():
    # Given the aggregates Store inherits
    composed = frozenset().union(*(methods(p) for p in AGGREGATES))
    # When Store's own methods are taken apart from theirs
    own = methods(Store) - composed
    # Then it adds only its lifecycle, and every aggregate is one of its bases
    assert own == {"close", "schema_version"}
    assert set(AGGREGATES) <= set(Store.__mro__)


def test_given_the_runtime_store_then_it_carries_no_token_session_or_login():
    # Given the server's own store and the runtime's
    # Then the sign-in state is the server's only, and the server's protocol names all of it
    assert methods(ServerStore) >= SERVER_ONLY
    assert not SERVER_ONLY & methods(Store)
    assert ServerStore not in Store.__mro__


def test_given_the_aggregates_then_no_method_is_declared_by_two_of_the_runtime_s():
    # Given the runtime's aggregates
    seen: dict[str, str] = {}
    twice = []
    # When their methods are gathered
    for protocol in AGGREGATES:
        for name in methods(protocol):
            if name in seen:
                twice.append((name, seen[name], protocol.__name__))
            seen[name] = protocol.__name__
    # Then each method has one home
    assert twice == []


def test_given_an_object_lacking_methods_then_the_gaps_name_them():
    # Given an object with none of the store's methods
    gaps = protocol_gaps(NoTokens())
    # Then every protocol is reported, each with its missing methods
    assert set(gaps) == {p.__name__ for p in PROTOCOLS}
    assert "commit" in gaps["RunLedger"] and "session_get" in gaps["ServerStore"]


def test_given_a_store_without_the_server_state_when_the_server_takes_it_then_it_is_refused_plainly():
    # Given an object that keeps no tokens or sessions
    # When the server asks for its store
    with pytest.raises(StoreError) as caught:
        server_store(NoTokens())
    # Then the error says what is missing and what to use
    assert "keeps no API tokens" in str(caught.value) and "memory://none" in str(caught.value)


def test_given_a_backend_when_the_server_takes_it_then_it_is_the_same_store(store):
    # Given a store of each backend / When the server asks for its store / Then it is that store
    assert server_store(store) is store
