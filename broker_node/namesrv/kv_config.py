"""``KvConfig``: the name server's namespaced key/value table (PUT/GET/DELETE_KV_CONFIG).

RocketMQ keeps small settings here, chiefly the order-topic configuration (namespace
``ORDER_TOPIC_CONFIG``, key = topic, value = ``brokerName:queueCount;...``) that
``mqadmin updateTopic -o true`` and ``updateOrderConf`` write. Postbox keeps it in memory: a
restart forgets it (Apache persists ``kvConfig.json``; re-run the admin command after a
restart). Bounded: ``namespaces_max`` namespaces, ``keys_max`` keys each, and names and values
of at most ``text_max_chars`` (``KvConfigFullError``).

Thread-safety: one lock; every method may be called from any thread.
"""

from __future__ import annotations

import threading

ORDER_TOPIC_NAMESPACE = "ORDER_TOPIC_CONFIG"


class KvConfigFullError(ValueError):
    """A put over the table's limits."""


class KvConfig:
    """Namespace → key → value, in memory."""

    def __init__(self, *, namespaces_max: int = 64, keys_max: int = 10_000,
                 text_max_chars: int = 4096) -> None:
        self._namespaces_max = namespaces_max
        self._keys_max = keys_max
        self._text_max_chars = text_max_chars
        self._lock = threading.Lock()
        self._table: dict[str, dict[str, str]] = {}

    def put(self, namespace: str, key: str, value: str) -> None:
        """Set ``namespace``/``key`` to ``value``."""
        for name, text in (("namespace", namespace), ("key", key), ("value", value)):
            if len(text) > self._text_max_chars:
                raise KvConfigFullError(f"{name} of {len(text)} characters is over "
                                        f"{self._text_max_chars}")
        with self._lock:
            entries = self._table.get(namespace)
            if entries is None:
                if len(self._table) >= self._namespaces_max:
                    raise KvConfigFullError(f"{len(self._table)} namespaces, the limit")
                entries = self._table[namespace] = {}
            if key not in entries and len(entries) >= self._keys_max:
                raise KvConfigFullError(f"namespace {namespace!r} holds {len(entries)} keys, "
                                        "the limit")
            entries[key] = value

    def get(self, namespace: str, key: str) -> str | None:
        """The value, or None."""
        with self._lock:
            return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        """Remove a key; whether it was there."""
        with self._lock:
            entries = self._table.get(namespace)
            if entries is None or key not in entries:
                return False
            del entries[key]
            if not entries:
                del self._table[namespace]
            return True

    def namespace(self, namespace: str) -> dict[str, str]:
        """A copy of one namespace ({} when absent)."""
        with self._lock:
            return dict(self._table.get(namespace, {}))


__all__ = ["ORDER_TOPIC_NAMESPACE", "KvConfig", "KvConfigFullError"]
