"""The broker a worker's ``--broker`` URL names (service/brokers.py): Redis or RabbitMQ, with the same
middleware; RabbitMQ with publisher confirms, checked on the machine's real RabbitMQ (127.0.0.1:5672, a
fresh queue per test, skipped without it; CI starts it and turns skips into failures)."""

from __future__ import annotations

import pytest
from dramatiq.middleware import Retries
from rabbitmq_helpers import RABBITMQ, delete_queues, free_port, fresh_queue, message_count, rabbitmq_or_skip

from sealflow.runtime import brokers, liveness


@pytest.fixture
def queue():
    """A fresh queue name on the machine's RabbitMQ; its queues are deleted afterwards."""
    rabbitmq_or_skip().close()
    name = fresh_queue()
    yield name
    delete_queues(rabbitmq_or_skip(), name)


def _noop_actor(broker, queue: str):
    import dramatiq

    def noop() -> None:
        pass

    return dramatiq.actor(noop, broker=broker, actor_name=f"noop_{queue}", queue_name=queue, max_retries=0)


@pytest.mark.parametrize("url, kind", [("amqp://guest:guest@127.0.0.1:5672/%2F", "RabbitmqBroker"),
                                       ("amqps://app:pw@rabbit.example/prod", "RabbitmqBroker"),
                                       ("redis://127.0.0.1:6379/0", "WakingRedisBroker")])
def test_given_a_broker_url_when_it_is_built_then_its_kind_has_only_retries_pinned_to_zero(url, kind):
    # Given a Redis or RabbitMQ URL, when the broker is built (connecting is lazy)
    broker = brokers.broker_from_url(url)
    try:
        # Then it is that broker, with the one middleware of every Sealflow broker: Retries at zero (and on
        # Redis the consumers' wake-up, service/redispoll.py, which acts on no message)
        assert type(broker).__name__ == kind
        assert [type(m).__name__ for m in broker.middleware] == ["Retries"] + (["_Wake"] if "Redis" in kind else [])
        assert isinstance(broker.middleware[0], Retries) and broker.middleware[0].max_retries == 0
    finally:
        broker.close()


def test_given_an_amqp_url_when_the_broker_is_built_then_publisher_confirms_are_on_and_blocking_is_bounded():
    pytest.importorskip("pika")
    broker = brokers.broker_from_url("amqp://guest:guest@127.0.0.1:5672/%2F")
    assert broker.confirm_delivery is True
    assert broker.parameters.blocked_connection_timeout == brokers.BLOCKED_TIMEOUT
    assert broker.max_priority is None  # one queue per priority: nothing for RabbitMQ to order within one
    # a setting of the URL's own wins
    own = brokers.broker_from_url("amqp://h/%2F?blocked_connection_timeout=5")
    assert own.parameters.blocked_connection_timeout == 5


def test_given_an_amqp_url_of_several_hosts_when_the_broker_is_built_then_each_host_blocks_for_a_bounded_time():
    pytest.importorskip("pika")
    # Given a URL naming two RabbitMQ hosts separated by ";" (Dramatiq tries them in turn), the second with a
    # blocked-connection timeout of its own
    url = "amqp://guest:guest@h1:5672/%2F;amqp://guest:guest@h2:5672/%2F?blocked_connection_timeout=5"
    # When the broker is built (connecting is lazy)
    broker = brokers.broker_from_url(url)
    # Then each host's parameters are bounded: the first by the default, the second by its own setting
    first, second = broker.parameters
    assert (first.host, first.blocked_connection_timeout) == ("h1", brokers.BLOCKED_TIMEOUT)
    assert (second.host, second.blocked_connection_timeout) == ("h2", 5)
    # and without a setting of its own anywhere, building it does not fail and every host gets the default
    plain = brokers.broker_from_url("amqp://h1/%2F;amqp://h2/%2F")
    assert [p.blocked_connection_timeout for p in plain.parameters] == [brokers.BLOCKED_TIMEOUT] * 2


@pytest.mark.parametrize("url, said", [
    ("http://user:s3cret@127.0.0.1:6379/0", "the scheme 'http://' is not a broker's"),
    ("kafka://broker:9092", "the scheme 'kafka://' is not a broker's"),
    ("127.0.0.1:5672", "a URL without a scheme is not a broker's"),
    ("localhost:5672", "a URL without a scheme is not a broker's"),
    ("", "a URL without a scheme is not a broker's"),
])
def test_given_a_url_of_no_broker_when_it_is_built_then_the_error_names_the_accepted_schemes(url, said):
    with pytest.raises(ValueError) as caught:
        brokers.broker_from_url(url)
    message = str(caught.value)
    assert message.startswith(said)
    for scheme in ("redis://", "rediss://", "unix://", "amqp://", "amqps://"):
        assert scheme in message
    assert "s3cret" not in message and message.count(". ") == 0  # one sentence, no password


@pytest.mark.parametrize("url, says", [("amqp://guest:guest@127.0.0.1:notaport/%2F", "Port could not be cast"),
                                       ("amqp://h:99999/", "Port out of range"),
                                       ("amqps://h/v?heartbeat=x", "Invalid heartbeat value")])
def test_given_an_amqp_url_pika_cannot_parse_when_it_is_built_then_it_is_a_value_error(url, says):
    pytest.importorskip("pika")
    with pytest.raises(ValueError, match=says):
        brokers.broker_from_url(url)


@pytest.mark.service
def test_given_a_queue_deleted_behind_the_brokers_back_when_a_message_is_sent_then_confirms_keep_it(queue):
    import pika

    # Given two brokers that declared the same queue: Sealflow's, and a peer without publisher confirms
    broker = brokers.broker_from_url(RABBITMQ)
    unconfirmed = brokers.broker_from_url(RABBITMQ)
    unconfirmed.confirm_delivery = False
    try:
        actor, peer_actor = _noop_actor(broker, queue), _noop_actor(unconfirmed, queue)
        actor.send()
        peer_actor.send()
        assert message_count(RABBITMQ, queue) == 2
        # and the queue then deleted by someone else
        delete_queues(rabbitmq_or_skip(), queue)

        # When the peer sends, then RabbitMQ drops the message in silence: no error, no queue, no message
        peer_actor.send()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="NOT_FOUND"):
            message_count(RABBITMQ, queue)

        # When Sealflow's broker sends, then RabbitMQ returns the unroutable message, the broker declares the
        # queue again and sends it again: the message is there
        actor.send()
        assert message_count(RABBITMQ, queue) == 1
    finally:
        broker.close()
        unconfirmed.close()


def test_given_no_rabbitmq_at_the_url_when_a_message_is_sent_then_the_send_raises():
    pytest.importorskip("pika")
    from dramatiq.errors import ConnectionClosed

    # Given a broker on a port where nothing listens
    broker = brokers.broker_from_url(f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F")
    try:
        actor = _noop_actor(broker, fresh_queue())
        # When a message is sent, then the send raises instead of dropping it; ping and identity say so too
        with pytest.raises(ConnectionClosed):
            actor.send()
        with pytest.raises(Exception):  # noqa: B017, PT011 - pika's AMQPConnectionError
            brokers.ping(broker)
        assert liveness.broker_identity(broker) is None
    finally:
        broker.close()


@pytest.mark.service
def test_given_rabbitmq_when_looked_at_twice_then_its_identity_holds_and_a_lost_connection_changes_it(queue):
    broker = brokers.broker_from_url(RABBITMQ)
    try:
        brokers.ping(broker)
        first = liveness.broker_identity(broker)
        assert first is not None and first == liveness.broker_identity(broker)
        # When the server closes the connection (as a restart does), then the next look is a new identity
        _generation, connection = broker._sealflow_ping
        connection.close()
        second = liveness.broker_identity(broker)
        assert second is not None and second != first
    finally:
        broker.close()


@pytest.mark.service
def test_given_messages_on_a_rabbitmq_queue_when_its_depth_is_read_then_it_counts_them(queue):
    from sealflow.runtime.telemetry.metrics import queue_depth

    broker = brokers.broker_from_url(RABBITMQ)
    try:
        assert queue_depth(broker, queue) == 0  # not declared yet
        actor = _noop_actor(broker, queue)
        for _ in range(3):
            actor.send()
        assert queue_depth(broker, queue) == 3
    finally:
        broker.close()


@pytest.mark.service
def test_given_scrapes_from_many_threads_when_depths_are_read_then_one_connection_serves_them(queue):
    import threading

    from sealflow.runtime.telemetry.metrics import queue_depth

    broker = brokers.broker_from_url(RABBITMQ)
    try:
        _noop_actor(broker, queue).send()
        before = len(broker.connections)
        # When ten scrape threads (as the metrics server's) each read the depth
        seen = []
        threads = [threading.Thread(target=lambda: seen.append(queue_depth(broker, queue))) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Then every one saw the message, and one connection more is open, not one per thread
        assert seen == [1] * 10
        assert len(broker.connections) == before + 1
    finally:
        broker.close()
