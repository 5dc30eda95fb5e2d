"""What the joins of the Spark job find, as column lookups for the Python engine: the store's
dead letters, retries and delivered delays by message id, the consumer groups' logs and
processed messages, and the committed offsets. Built once per run from the Arrow tables and the
(few) store rows; every lookup answers a whole column at once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from .arrow_text import Column
from .store_decode import DELIVERED, DLQ, RETRY, StoreRow
from .store_files import CommittedOffset

SEPARATOR = "\x00"
"""Between the parts of a composite key (no group, topic or id holds it)."""

OFFSET_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()),
                           ("consumer_group", pa.string()), ("offset", pa.int64())])


@dataclass(frozen=True)
class Tables:
    """The outbox tables, with the columns and types of ``table_export``."""

    stubs: pa.Table
    logs: pa.Table
    processed: pa.Table


@dataclass
class Lookup:
    """Values by key: ``get`` answers a whole column of keys (null where a key is absent)."""

    keys: pa.Array
    values: dict[str, pa.Array] = field(default_factory=dict)

    @classmethod
    def of(cls, found: Mapping[str, tuple], names: tuple[str, ...],
           types: tuple[pa.DataType, ...]) -> Lookup:
        """From ``{key: (value, ...)}``: the values named ``names``, of ``types``."""
        columns = list(zip(*found.values(), strict=True)) if found else [()] * len(names)
        return cls(pa.array(list(found), pa.string()),
                   {name: pa.array(list(column), kind)
                    for name, column, kind in zip(names, columns, types, strict=True)})

    def get(self, keys: Column, name: str) -> Column:
        """The value ``name`` of each key (null for a key not here)."""
        return pc.take(self.values[name], pc.index_in(keys, value_set=self.keys))

    def has(self, keys: Column) -> Column:
        """Whether each key is here."""
        return pc.is_in(keys, value_set=self.keys)


def pair_keys(*parts: Column) -> Column:
    """One composite key per row (null where a part is null)."""
    return pc.binary_join_element_wise(*parts, SEPARATOR)


class Facts:
    """The lookups one classification needs."""

    def __init__(self, tables: Tables, offsets: Iterable[CommittedOffset],
                 store_rows: list[StoreRow]) -> None:
        self._store_facts(store_rows)
        logs = tables.logs
        if logs.num_rows:
            first = logs.group_by("message_id").aggregate([("consumer_group", "min")])
            self.logged = Lookup(first["message_id"].combine_chunks(),
                                 {"group": first["consumer_group_min"].combine_chunks()})
        else:
            self.logged = Lookup(pa.array([], pa.string()), {"group": pa.array([], pa.string())})
        self.logged_pairs = Lookup(pair_keys(logs["consumer_group"], logs["message_id"]))
        self._processed = tables.processed
        listed = list(offsets)
        self.offsets = pa.table([pa.array([o.topic for o in listed], pa.string()),
                                 pa.array([o.queue_id for o in listed], pa.int32()),
                                 pa.array([o.consumer_group for o in listed], pa.string()),
                                 pa.array([o.offset for o in listed], pa.int64())],
                                schema=OFFSET_SCHEMA)

    def processed(self, ids: Column) -> Lookup:
        """The (group, id) keys of the processed rows of the messages ``ids`` (those alone:
        a table of a million processed rows is not hashed for a few thousand open stubs)."""
        rows = self._processed
        rows = rows.filter(pc.is_in(rows["message_id"], value_set=ids))
        return Lookup(pair_keys(rows["consumer_group"], rows["message_id"]))

    def _store_facts(self, store_rows: list[StoreRow]) -> None:
        delivered: dict[str, tuple] = {}
        dead: dict[str, tuple] = {}       # id -> (min group, max reason)
        retry: dict[str, tuple] = {}
        dead_by_group: dict[str, tuple] = {}   # group + id -> (max reason,)
        retry_by_group: dict[str, tuple] = {}
        for row in store_rows:
            if row.kind == DELIVERED and row.unique_key is not None:
                key = f"{row.unique_key}{SEPARATOR}{row.topic}"
                delivered[key] = max(delivered.get(key, (-1, -1)),
                                     (row.queue_offset, row.queue_id))
            elif row.kind in (DLQ, RETRY):
                by_id, by_group = ((dead, dead_by_group) if row.kind == DLQ
                                   else (retry, retry_by_group))
                for message_id in (name for name in {row.unique_key, row.origin_message_id}
                                   if name is not None):
                    group_before, reason_before = by_id.get(message_id, (None, None))
                    by_id[message_id] = (_min(group_before, row.consumer_group),
                                         _max(reason_before, row.reason))
                    if row.consumer_group is not None:  # a group's key names a group
                        key = f"{row.consumer_group}{SEPARATOR}{message_id}"
                        by_group[key] = (_max(by_group.get(key, (None,))[0], row.reason),)
        self.delivered = Lookup.of(delivered, ("queue_offset", "queue_id"),
                                   (pa.int64(), pa.int32()))
        text = pa.string()
        self.dead = Lookup.of(dead, ("group", "reason"), (text, text))
        self.retry = Lookup.of(retry, ("group", "reason"), (text, text))
        self.dead_by_group = Lookup.of(dead_by_group, ("reason",), (text,))
        self.retry_by_group = Lookup.of(retry_by_group, ("reason",), (text,))


def _min(a, b):
    return b if a is None else a if b is None else min(a, b)


def _max(a, b):
    return b if a is None else a if b is None else max(a, b)


__all__ = ["Facts", "Lookup", "OFFSET_SCHEMA", "SEPARATOR", "Tables", "pair_keys"]
