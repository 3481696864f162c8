# Order POP's per-queue record: what was handed out, what is acked, until when the head is held.
"""One queue's order-POP state (Java ``ConsumerOrderInfoManager.OrderInfo``) and its rules.

An order POP hands out a run of a queue's messages and holds the queue's head until every one
of them is acknowledged or its invisible time has passed; only then does the next POP of the
group get messages of that queue. The record keeps the run (``offset_list``: first offset,
then each later one minus the first), the pop time and invisible time, per message a later
visible time (CHANGE_MESSAGE_INVISIBLETIME) and a consumed count (how many earlier runs handed
it out: the reconsume count the answer's ``orderCountInfo`` reports), the acknowledged bits and
the POP's ``attemptId``: a POP that repeats the attempt id of the run is a retry of the same
receive (its answer was lost) and gets the run again instead of being held (reentrant).

Times are epoch ms and passed in, so the rules are plain functions of their inputs. The JSON
form (:meth:`OrderInfo.to_json`) is Java's, as ``config/consumerOrderInfo.json`` holds it.
"""
import dataclasses
from typing import Any

from pybroker.protocol.pop import OffsetInfos

__all__ = ["OrderInfo", "NEXT_OFFSET_ILLEGAL", "NEXT_OFFSET_NOT_COMMITTED",
           "ORDER_INFO_CLEAN_AFTER_MS"]

NEXT_OFFSET_ILLEGAL = -1          # commit_and_next: the offset is not in the run
NEXT_OFFSET_NOT_COMMITTED = -2    # ... the ack is of another run (pop time differs)
# Java drops a queue's record when it was not consumed for a day (autoClean).
ORDER_INFO_CLEAN_AFTER_MS = 24 * 3600 * 1000


@dataclasses.dataclass
class OrderInfo:
    """See the module docstring. ``offset_list`` is Java's compressed form."""
    pop_time: int
    invisible_time: int | None
    offset_list: list[int]
    last_consume_timestamp: int
    commit_offset_bit: int = 0
    attempt_id: str | None = None
    offset_next_visible_time: dict[int, int] | None = None
    offset_consumed_count: dict[int, int] | None = None

    @classmethod
    def new_run(cls, attempt_id: str | None, pop_time: int, invisible_time: int,
                queue_offsets: list[int], now_ms: int) -> "OrderInfo":
        """The record of a run of ``queue_offsets`` handed out at ``pop_time``."""
        first = queue_offsets[0]
        compressed = [first] + [offset - first for offset in queue_offsets[1:]]
        return cls(pop_time, invisible_time, compressed, now_ms, 0, attempt_id)

    # --- offsets ---------------------------------------------------------------------------------
    def queue_offset(self, index: int) -> int:
        """The queue offset of message ``index`` of the run."""
        return _queue_offset(self.offset_list, index)

    def queue_offsets(self) -> list[int]:
        return [self.queue_offset(index) for index in range(len(self.offset_list))]

    def is_acked(self, index: int) -> bool:
        return bool(self.commit_offset_bit >> index & 1)

    def next_offset(self) -> int:
        """Where the group continues: the first unacknowledged message, or past the run."""
        if not self.offset_list:
            return NEXT_OFFSET_NOT_COMMITTED
        for index in range(len(self.offset_list)):
            if not self.is_acked(index):
                return self.queue_offset(index)
        return self.queue_offset(len(self.offset_list) - 1) + 1

    # --- the rules -------------------------------------------------------------------------------
    def merge_consumed_counts(self, previous: "OrderInfo") -> None:
        """Count this run's messages that ``previous`` handed out too (Java
        mergeOffsetConsumedCount); a retry of the same attempt keeps the previous counts."""
        counts = previous.offset_consumed_count or {}
        if previous.attempt_id is not None and previous.attempt_id == self.attempt_id:
            self.offset_consumed_count = dict(counts)
            return
        before = set(previous.queue_offsets())
        self.offset_consumed_count = {offset: counts.get(offset, 0) + 1
                                      for offset in self.queue_offsets() if offset in before}

    def add_order_counts(self, infos: OffsetInfos, topic: str, queue_id: int) -> None:
        """The run's entries of the answer's orderCountInfo (Java's update tail)."""
        counts = self.offset_consumed_count
        if counts is None:
            minimum = 0
        else:
            minimum = min(counts.values(), default=1 << 31)
            for offset, count in counts.items():
                infos.add_order_count(topic, queue_id, offset, count)
            if len(counts) != len(self.offset_list):
                minimum = 0      # some message of the run is consumed the first time
        if minimum == 1 << 31:
            minimum = 0
        # The per-queue entry: older clients read the count by queue id only.
        infos.add_order_count(topic, queue_id, None, minimum)

    def need_block(self, attempt_id: str | None, current_invisible_time: int,
                   now_ms: int) -> bool:
        """Whether the queue's head is held: an unacknowledged message of the run is still
        invisible, and the POP is not a retry of the run's attempt."""
        if not self.offset_list:
            return False
        if self.attempt_id is not None and self.attempt_id == attempt_id:
            return False
        if self.invisible_time is None or self.invisible_time <= 0:
            self.invisible_time = current_invisible_time
        for index in range(len(self.offset_list)):
            if not self.is_acked(index) and now_ms < self._next_visible(index):
                return True
        return False

    def lock_free_timestamp(self, now_ms: int) -> int | None:
        """When the head stops being held (now if it is not), None when unknown."""
        if not self.offset_list:
            return None
        for index in range(len(self.offset_list)):
            if self.is_acked(index):
                continue
            if self.invisible_time is None or self.invisible_time <= 0:
                return None
            visible = self._next_visible(index)
            if now_ms < visible:
                return visible
        return now_ms

    def _next_visible(self, index: int) -> int:
        assert self.invisible_time is not None
        visible = self.pop_time + self.invisible_time
        if self.offset_next_visible_time is not None:
            visible = self.offset_next_visible_time.get(self.queue_offset(index), visible)
        return visible

    def commit_and_next(self, queue_offset: int, pop_time: int) -> int:
        """Mark ``queue_offset`` of the run popped at ``pop_time`` acknowledged; returns the
        next consumer offset, NEXT_OFFSET_ILLEGAL or NEXT_OFFSET_NOT_COMMITTED."""
        if not self.offset_list:
            return NEXT_OFFSET_ILLEGAL
        if pop_time != self.pop_time:
            return NEXT_OFFSET_NOT_COMMITTED
        for index in range(len(self.offset_list)):
            if self.queue_offset(index) == queue_offset:
                self.commit_offset_bit |= 1 << index
                return self.next_offset()
        return NEXT_OFFSET_ILLEGAL

    def update_next_visible_time(self, queue_offset: int, pop_time: int,
                                 next_visible_time: int) -> bool:
        """CHANGE_MESSAGE_INVISIBLETIME of one message of the run; False when ``pop_time`` is
        another run's (nothing changes)."""
        if pop_time != self.pop_time:
            return False
        if self.offset_next_visible_time is None:
            self.offset_next_visible_time = {}
        self.offset_next_visible_time[queue_offset] = next_visible_time
        return True

    # --- JSON (consumerOrderInfo.json) ---------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Java's fields, nulls left out."""
        value: dict[str, Any] = {}
        if self.attempt_id is not None:
            value["a"] = self.attempt_id
        value["cm"] = self.commit_offset_bit
        if self.invisible_time is not None:
            value["i"] = self.invisible_time
        value["l"] = self.last_consume_timestamp
        value["o"] = self.offset_list
        if self.offset_consumed_count is not None:
            value["oc"] = self.offset_consumed_count
        if self.offset_next_visible_time is not None:
            value["ot"] = self.offset_next_visible_time
        value["popTime"] = self.pop_time
        return value

    @classmethod
    def from_json(cls, value: Any) -> "OrderInfo":
        """ValueError for anything that is not an OrderInfo object."""
        if not isinstance(value, dict):
            raise ValueError("an OrderInfo must be an object")
        offsets = value.get("o", value.get("offsetList")) or []
        if not isinstance(offsets, list) or not all(_is_int(item) for item in offsets):
            raise ValueError("o must be a list of numbers")
        invisible = value.get("i", value.get("invisibleTime"))
        return cls(
            pop_time=_int(value.get("popTime", 0)),
            invisible_time=None if invisible is None else _int(invisible),
            offset_list=[int(item) for item in offsets],
            last_consume_timestamp=_int(value.get("l", value.get("lastConsumeTimestamp", 0))),
            commit_offset_bit=_int(value.get("cm", value.get("commitOffsetBit", 0))),
            attempt_id=_str_or_none(value.get("a", value.get("attemptId"))),
            offset_next_visible_time=_long_map(value.get("ot",
                                                         value.get("offsetNextVisibleTime"))),
            offset_consumed_count=_long_map(value.get("oc", value.get("offsetConsumedCount"))))


def _queue_offset(offset_list: list[int], index: int) -> int:
    return offset_list[0] if index == 0 else offset_list[0] + offset_list[index]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"not a number: {value!r:.40}")
    return int(value)


def _str_or_none(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("attemptId must be a string")
    return value


def _long_map(value: Any) -> dict[int, int] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("an offset map must be an object")
    return {int(key): _int(item) for key, item in value.items()}
