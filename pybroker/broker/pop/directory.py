# The supervisor's side of the shared POP state: which slot holds which queue, offsets, order.
"""The directory of the POP table (``store/pop_table.py``), owned by the metadata service.

* **Slots.** A remoting worker that pops or acks a topic@group@queue for the first time asks
  for its slot (internal code POP_SLOTS); :meth:`PopDirectory.slots_for` assigns free ones, with
  the queue's committed consumer offset as its pop offset and, for order POP, the queue's record
  from ``config/consumerOrderInfo.json``. Only this process writes the directory.
* **Offsets.** POP commits a group's offset when it hands messages out (Java: at pop time).
  The workers write it into the slot; :meth:`harvest` copies every changed slot's pop offset
  into the consumer offsets (persisted with consumerOffset.json), every HARVEST_INTERVAL_MS.
  The other way, a commit by another writer (a pull client of the group, an admin reset) is
  handed to the slot (:meth:`offset_committed`), which the next POP of the queue takes.
* **Order records** are written by the workers into the slots and persisted here into
  ``config/consumerOrderInfo.json`` with Java's autoClean rules (:meth:`persist_order_infos`).
* **Recovery.** After a kill -9 the old table file is still there: :meth:`recover` takes its
  pop offsets and order records (newer than the JSON documents) before a fresh table is made.
"""
import logging
from collections.abc import Callable, Iterable

import orjson

from pybroker.broker.managers.consumer_offset import ConsumerOffsetManager
from pybroker.broker.pop.order_info import ORDER_INFO_CLEAN_AFTER_MS, OrderInfo
from pybroker.store import config_docs
from pybroker.store.pop_table import PopTable, SlotKey

__all__ = ["PopDirectory", "PopTableFull", "HARVEST_INTERVAL_MS", "load_order_infos",
           "recover_table"]

log = logging.getLogger("pybroker.broker.pop")

HARVEST_INTERVAL_MS = 200
_TOPIC_GROUP_SEPARATOR = "@"

OrderTable = dict[str, dict[int, OrderInfo]]     # "topic@group" -> queue id -> record


class PopTableFull(Exception):
    """No free slot is left (popSlotsMax)."""


def _order_key(topic: str, group: str) -> str:
    return f"{topic}{_TOPIC_GROUP_SEPARATOR}{group}"


def load_order_infos(path: str) -> OrderTable:
    """``consumerOrderInfo.json`` (Java's ``{"table":{"topic@group":{qid:OrderInfo}}}``); a
    record that does not decode is dropped with a warning (the queue is then not held)."""
    def decode(value: dict) -> OrderTable:
        table: OrderTable = {}
        for key, queues in (value.get("table") or {}).items():
            if not isinstance(queues, dict):
                continue
            for queue_id, record in queues.items():
                try:
                    table.setdefault(key, {})[int(queue_id)] = OrderInfo.from_json(record)
                except ValueError as error:
                    log.warning("consumerOrderInfo.json: %s queue %s dropped: %s", key,
                                queue_id, error)
        return table
    return config_docs.load_json_document(path, decode, dict)


def _order_document(table: OrderTable) -> dict:
    return {"table": {key: {queue_id: record.to_json() for queue_id, record in queues.items()}
                      for key, queues in table.items() if queues}}


def recover_table(path: str, offsets: ConsumerOffsetManager, orders: OrderTable) -> int:
    """Take the pop offsets and order records of a table a killed broker left at ``path``
    (they are newer than the JSON documents); returns how many slots were taken. A file that is
    not a table is ignored (a new one replaces it)."""
    try:
        old = PopTable.attach(path)
    except (OSError, ValueError) as error:
        log.warning("POP table %s not recovered: %s", path, error)
        return 0
    taken = 0
    try:
        for slot, key in old.assigned_slots():
            pending = old.pending_offset(slot)
            offset = pending.value if pending is not None else old.pop_offset(slot)
            if offset is not None:
                offsets.commit_popped(key.group, key.topic, key.queue_id, offset)
            record = old.order_record(slot)
            if record is not None:
                try:
                    orders.setdefault(_order_key(key.topic, key.group), {})[key.queue_id] = \
                        OrderInfo.from_json(orjson.loads(record))
                except (ValueError, orjson.JSONDecodeError) as error:
                    log.warning("POP order record of %s not recovered: %s", key, error)
            taken += 1
    finally:
        old.close()
    if taken:
        log.warning("POP state of %d queues recovered from %s", taken, path)
    return taken


class PopDirectory:
    """The directory of ``table`` (see the module docstring). ``offsets``: the consumer
    offsets; ``order_path``: consumerOrderInfo.json; ``orders``: its loaded records;
    ``now_ms``: the clock; ``exists(topic, group, queue_id)``: whether the topic (with that
    queue) and the group still exist (autoClean)."""

    def __init__(self, table: PopTable, offsets: ConsumerOffsetManager, order_path: str,
                 orders: OrderTable, now_ms: Callable[[], int],
                 exists: Callable[[str, str, int], bool] = lambda topic, group, queue: True):
        self.table = table
        self.offsets = offsets
        self.order_path = order_path
        self.orders = orders
        self.now_ms = now_ms
        self.exists = exists
        self._slots: dict[SlotKey, int] = dict(
            (key, slot) for slot, key in table.assigned_slots())
        self._next_free = 0
        # In-flight counts start here: acks of POPs made before this directory's table (a
        # previous broker run) do not count, those of every later POP do (Java ignores pops
        # before the broker's start time the same way).
        self.counting_since_ms = now_ms()
        self._harvested: dict[int, int] = {}
        self.harvests_total = 0

    # --- slots ---------------------------------------------------------------------------------
    def slot_of(self, key: SlotKey) -> int | None:
        """The slot assigned to ``key``, None when it has none."""
        return self._slots.get(key)

    def slots_for(self, keys: Iterable[SlotKey]) -> list[int]:
        """The slots of ``keys``, assigning free ones (PopTableFull when none is left)."""
        return [self._slot_for(key) for key in keys]

    def _slot_for(self, key: SlotKey) -> int:
        slot = self._slots.get(key)
        if slot is not None:
            return slot
        while self._next_free < self.table.slots and self.table.assigned(self._next_free):
            self._next_free += 1
        if self._next_free >= self.table.slots:
            raise PopTableFull(f"the POP table's {self.table.slots} slots are all in use "
                               f"(popSlotsMax)")
        slot = self._next_free
        committed = self.offsets.query(key.group, key.topic, key.queue_id)
        self.table.assign(slot, key, committed if committed >= 0 else None,
                          self.counting_since_ms)
        record = self.orders.get(_order_key(key.topic, key.group), {}).get(key.queue_id)
        if record is not None:
            self.table.set_order_record(slot, orjson.dumps(record.to_json(),
                                                           option=orjson.OPT_NON_STR_KEYS))
        self._slots[key] = slot
        if committed >= 0:
            self._harvested[slot] = committed
        return slot

    def slots(self) -> dict[SlotKey, int]:
        """Every assigned key and its slot (a copy)."""
        return dict(self._slots)

    # --- offsets -------------------------------------------------------------------------------
    def offset_committed(self, group: str, topic: str, queue_id: int, offset: int,
                         reset: bool) -> None:
        """Another writer set the queue's consumer offset: the next POP takes it (a reset
        always, a commit when it is ahead of the pop offset)."""
        slot = self._slots.get(SlotKey(topic, group, queue_id))
        if slot is not None:
            self.table.set_offset(slot, offset, reset)
            self._harvested[slot] = offset

    def harvest(self) -> int:
        """Copy each slot's pop offset that changed since the last harvest into the consumer
        offsets (not while an offset set here waits for the POP side); returns how many."""
        committed = 0
        table, harvested = self.table, self._harvested
        for key, slot in self._slots.items():
            offset = table.pop_offset(slot)
            if offset is None or harvested.get(slot) == offset:
                continue
            if table.pending_offset(slot) is not None:
                continue
            self.offsets.commit_popped(key.group, key.topic, key.queue_id, offset)
            harvested[slot] = offset
            committed += 1
        self.harvests_total += 1
        return committed

    # --- order records ---------------------------------------------------------------------------
    def collect_order_infos(self) -> OrderTable:
        """The slots' order records over the loaded ones."""
        table: OrderTable = {key: dict(queues) for key, queues in self.orders.items()}
        for key, slot in self._slots.items():
            record = self.table.order_record(slot)
            queues = table.setdefault(_order_key(key.topic, key.group), {})
            if record is None:
                queues.pop(key.queue_id, None)
                continue
            try:
                queues[key.queue_id] = OrderInfo.from_json(orjson.loads(record))
            except (ValueError, orjson.JSONDecodeError) as error:
                log.error("POP order record of %s unreadable: %s", key, error)
        return table

    def persist_order_infos(self) -> None:
        """Write consumerOrderInfo.json, without the records Java's autoClean drops (topic or
        group gone, queue beyond the topic's read queues, not consumed for a day)."""
        table = self.collect_order_infos()
        now_ms = self.now_ms()
        for key in list(table):
            topic, _, group = key.rpartition(_TOPIC_GROUP_SEPARATOR)
            queues = table[key]
            for queue_id in list(queues):
                stale = now_ms - queues[queue_id].last_consume_timestamp > \
                    ORDER_INFO_CLEAN_AFTER_MS
                if stale or not self.exists(topic, group, queue_id):
                    del queues[queue_id]
            if not queues:
                del table[key]
        self.orders = table
        config_docs.save_json_document(self.order_path, _order_document(table))

    # --- views ---------------------------------------------------------------------------------
    def queue_figures(self, group: str, topic: str, queue_id: int) -> tuple[int, int] | None:
        """(pop offset, in-flight messages) of a queue the group pops, None when it has no
        slot (never popped since start) or no pop offset yet."""
        slot = self._slots.get(SlotKey(topic, group, queue_id))
        if slot is None:
            return None
        offset = self.table.pop_offset(slot)
        if offset is None:
            return None
        return offset, max(self.table.in_flight(slot), 0)

    def in_flight(self, group: str | None = None,
                  topic: str | None = None) -> dict[SlotKey, int]:
        """In-flight counts by key, optionally of one group and topic (retry topics included
        by their own keys)."""
        return {key: self.table.in_flight(slot) for key, slot in self._slots.items()
                if (group is None or key.group == group) and
                (topic is None or key.topic == topic)}
