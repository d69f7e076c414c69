"""Approval notifications: when a gate opens, an outbound message per configured channel.

* :mod:`.config` reads the ``notifications:`` section of the runtime configuration (channels of kind
  ``webhook`` or ``slack``, filters, ``public_url``, timeout, attempts, backoff);
* :mod:`.gates` finds the commit that opens a gate and adds one delivery row per channel to it, so the store
  writes them in the same transaction (the outbox pattern);
* :mod:`.bodies` renders a delivery for its channel (a Standard Webhooks signed JSON POST, a Slack body);
* :mod:`.deliver` posts due rows with bounded retries and dead-letters what keeps failing.

See docs/operations.md, "Approval notifications".
"""

from __future__ import annotations

from .config import Channel, NotifyConfig, load
from .deliver import Deliverer, Report
from .gates import Notifier


def hooks(config: NotifyConfig) -> tuple[Notifier, ...]:
    """The engine middleware of ``config`` (read by :func:`load`, which raises ConfigError naming a mistake):
    when it has channels, a :class:`Notifier` adding the deliveries of every gate that opens to its commit."""
    return (Notifier(config),) if config.channels else ()


__all__ = ["Channel", "NotifyConfig", "load", "hooks", "Deliverer", "Report", "Notifier"]
