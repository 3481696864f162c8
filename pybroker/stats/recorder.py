# What a remoting worker records per request: Java's broker stats keys, from Python paths.
"""The remoting worker's side of the statistics (Java BrokerStatsManager's inc* calls).

One :class:`Recorder` per worker wraps its :class:`~pybroker._fast.stats.StatsWriter`. Each
call is a handful of C-level stores (no system call, no allocation after a key's first use).
With the instruments off (statsInstrumentsEnable=false) every method returns after one check
of ``enabled`` (the writer's methods would be no-ops too; this skips the clock reads and the
bookkeeping around them).
"""
import itertools
import time
from collections.abc import Callable

from pybroker._fast.stats import KeyWord, StatsWriter
from pybroker._fast.stats import StatsCounter as C
from pybroker._fast.stats import StatsHistogram as H
from pybroker._fast.stats import StatsKeyKind as K
from pybroker.stats.region import private_writer
from pybroker.stats import metric_names as names
from pybroker.stats.service import put_distribute_bucket

__all__ = ["Recorder", "FAMILY_COUNTERS", "PULL_OFFSET_KEYS_MAX", "PUT_LABEL_STATS_ONLY"]

# Label of a TOPIC_PUT key for puts Java counts in statsAll (BrokerStatsManager) but not in
# rocketmq_messages_in_total (its send processors only): the timer's deliveries. Labels 0-2
# are the send paths' message types (metric_names.MESSAGE_TYPE_LABELS).
PUT_LABEL_STATS_ONLY = 3

# KEY_PULL_OFFSET entries one worker keeps (one per topic, group and queue it served): the rest
# of its key table stays for the TOPIC_PUT / GROUP_GET figures. A queue beyond it is not
# tracked (counted in KEYS_DROPPED); the exporter then treats it as pulled up to its committed
# offset, as Java does for a queue missing from its pullOffsetTable.
PULL_OFFSET_KEYS_MAX = 256

# Request families whose requests waiting are reported as Java's thread-pool queue sizes:
# (started counter, answered counter, oldest-unanswered gauge).
FAMILY_COUNTERS = {"send": (C.SEND_STARTED, C.SEND_FINISHED, C.SEND_OLDEST_MS),
                   "pull": (C.PULL_STARTED, C.PULL_FINISHED, C.PULL_OLDEST_MS),
                   "query": (C.QUERY_STARTED, C.QUERY_FINISHED, C.QUERY_OLDEST_MS),
                   "transaction": (C.TRANSACTION_STARTED, C.TRANSACTION_FINISHED,
                                   C.TRANSACTION_OLDEST_MS),
                   "ack": (C.ACK_STARTED, C.ACK_FINISHED, C.ACK_OLDEST_MS)}


class Recorder:
    """Counters of one remoting worker (or of a test's in-process broker)."""

    def __init__(self, writer: StatsWriter | None = None):
        self.writer = writer if writer is not None else private_writer()
        self.enabled = self.writer.enabled
        # (queue id, "topic@group") -> this writer's KEY_PULL_OFFSET entry.
        self._pull_offset_keys: dict[tuple[int, str], int] = {}
        # Unanswered requests per family, oldest first: token -> start (epoch ms).
        self._waiting: dict[str, dict[int, int]] = {family: {} for family in FAMILY_COUNTERS}
        self._tokens = itertools.count(1)
        # The send fast path's oldest unanswered send (epoch ms, 0: none), when a fast path
        # shares this worker: the SEND_OLDEST_MS gauge covers both paths.
        self.send_oldest_elsewhere: Callable[[], int] | None = None
        # Told the handlers' oldest unanswered send (epoch ms, 0: none) each time it changes
        # (the fast path's SendPath.set_python_oldest: it writes the gauge on every take).
        self.send_oldest_changed: Callable[[int], object] | None = None

    def request_started(self, family: str | None) -> int:
        """Count a request; returns the token to pass to :meth:`request_finished`."""
        if not self.enabled:
            return 0
        writer = self.writer
        writer.add(C.REQUESTS_TOTAL)
        if family is None:
            return 0
        started, _, oldest = FAMILY_COUNTERS[family]
        writer.add(started)
        token = next(self._tokens)
        waiting = self._waiting[family]
        now_ms = time.time_ns() // 1_000_000
        if not waiting:
            self._set_oldest(family, oldest, now_ms)
        waiting[token] = now_ms
        return token

    def request_finished(self, family: str | None, token: int, elapsed_us: int,
                         answer: tuple[int, int, bool] | None = None) -> None:
        """The end of a request started by :meth:`request_started`; ``answer``: (request
        code, response code, oneway) for rocketmq_rpc_latency's series, None when the
        request was held (a long poll: :meth:`rpc` counts it when it is answered)."""
        if not self.enabled:
            return
        writer = self.writer
        writer.record(H.RPC_LATENCY_US, elapsed_us)
        if answer is not None:
            request_code, response_code, oneway = answer
            self.rpc(request_code, response_code, elapsed_us, result="oneway" if oneway
                     else "success")
        if family is None:
            return
        _, finished, oldest = FAMILY_COUNTERS[family]
        writer.add(finished)
        waiting = self._waiting[family]
        first = next(iter(waiting))
        del waiting[token]
        if token == first:
            self._set_oldest(family, oldest, next(iter(waiting.values()), 0))

    def _set_oldest(self, family: str, gauge: int, start_ms: int) -> None:
        if family == "send" and self.send_oldest_changed is not None:
            self.send_oldest_changed(start_ms)
        if family == "send" and self.send_oldest_elsewhere is not None:
            elsewhere = self.send_oldest_elsewhere()
            if elsewhere and (not start_ms or elsewhere < start_ms):
                start_ms = elsewhere
        self.writer.set(gauge, start_ms)

    def oldest_ms(self, family: str) -> int:
        """Start (epoch ms) of the oldest request of ``family`` this Recorder waits for, 0
        when none."""
        return next(iter(self._waiting[family].values()), 0)

    def rpc(self, request_code: int, response_code: int, elapsed_us: int,
            long_polling: bool = False, result: str = "success") -> None:
        """One rocketmq_rpc_latency value (Java's explicit ms buckets) under Java's labels."""
        if not self.enabled:
            return
        writer = self.writer
        bucket = names.rpc_bucket(elapsed_us // 1000)
        writer.key_add(writer.key(K.KEY_RPC, bucket, names.rpc_key(
            request_code, response_code, long_polling, result)), 1, elapsed_us)

    def topic_put(self, topic: str, messages: int, size_bytes: int, label: int = 0) -> None:
        """A SEND stored ``messages`` messages of ``size_bytes`` (TOPIC_PUT_NUMS/SIZE,
        BROKER_PUT_NUMS, the message-size histogram, and Java's per-topic message_size: one
        value per put, its bytes per message)."""
        if not self.enabled:
            return
        writer = self.writer
        writer.key_add(writer.key(K.KEY_TOPIC_PUT, label, topic), messages, size_bytes)
        writer.add(C.BROKER_PUT_NUMS, messages)
        if messages:
            writer.record(H.MESSAGE_SIZE_BYTES, size_bytes // messages, messages)
            each = size_bytes // messages
            if label == PUT_LABEL_STATS_ONLY:
                return        # Java's message_size is its send processors' only
            writer.key_add(writer.key(K.KEY_MESSAGE_SIZE, names.message_size_label(label, each),
                                      topic), 1, each)

    def send_to_dlq(self, topic: str, group: str) -> None:
        """A message of ``topic`` consumed by ``group`` went to the group's DLQ
        (rocketmq_send_to_dlq_messages_total)."""
        if not self.enabled:
            return
        writer = self.writer
        writer.key_add(writer.key(K.KEY_SEND_TO_DLQ, 0, f"{topic}@{group}"), 1)

    def transaction(self, real_topic: str, event: int) -> None:
        """A half message of ``real_topic`` prepared, committed, rolled back or discarded
        (names.TransactionEvent)."""
        if not self.enabled:
            return
        writer = self.writer
        writer.key_add(writer.key(K.KEY_TRANSACTION, int(event), real_topic), 1)

    def transaction_finished(self, real_topic: str, latency_s: int) -> None:
        """A commit ``latency_s`` after the half message was born
        (rocketmq_finish_message_latency, in seconds as Java records it)."""
        if not self.enabled:
            return
        writer = self.writer
        bucket = names.bucket_of(latency_s, names.FINISH_LATENCY_BUCKETS_S)
        writer.key_add(writer.key(K.KEY_FINISH_LATENCY, bucket, real_topic), 1,
                       max(latency_s, 0))

    def put_latency(self, elapsed_ns: int) -> None:
        """A put request's wait for the store (Java putMessageEntireTime)."""
        if not self.enabled:
            return
        writer = self.writer
        elapsed_ms = elapsed_ns // 1_000_000
        writer.record(H.PUT_LATENCY_US, elapsed_ns // 1000)
        writer.add(C.PUT_DISTRIBUTE_0 + put_distribute_bucket(elapsed_ms))
        writer.raise_to(C.PUT_ENTIRE_TIME_MAX_MS, elapsed_ms)

    def store_get(self, found: bool, messages: int, size_bytes: int, elapsed_ns: int) -> None:
        """One store read for a pull (Java StoreStatsService's get counters)."""
        if not self.enabled:
            return
        writer = self.writer
        if found:
            writer.add(C.GET_FOUND)
            writer.add(C.GET_TRANSFERRED_MESSAGES, messages)
            writer.add(C.GET_TRANSFERRED_BYTES, size_bytes)
        else:
            writer.add(C.GET_MISS)
        writer.raise_to(C.GET_ENTIRE_TIME_MAX_MS, elapsed_ns // 1_000_000)

    def group_get(self, topic: str, group: str, messages: int, size_bytes: int,
                  cold: bool = False) -> None:
        """Messages handed to a consumer group (GROUP_GET_NUMS/SIZE, BROKER_GET_NUMS);
        ``cold``: the pull read pages that were not in the page cache."""
        if not self.enabled:
            return
        writer = self.writer
        entry = writer.key(K.KEY_GROUP_GET, 0, f"{topic}@{group}")
        writer.key_add(entry, messages, size_bytes)
        if cold:
            writer.key_add_word(entry, KeyWord.KEY_COLD_REQUESTS, 1)
        writer.add(C.BROKER_GET_NUMS, messages)

    def damaged_record_read(self) -> None:
        """A read met a damaged record and did not serve it (pybroker/store/read_api.py)."""
        if self.enabled:
            self.writer.add(C.DAMAGED_RECORDS_READ)

    def pull_residency(self, pages: int, cold_pages: int, java_in_disk: bool,
                       read_ns: int) -> None:
        """Page-cache residency of one pull's records (read before anything touched them)
        and the time its store read and copy took; ``java_in_disk``: Java's
        accessMessageInMemoryMaxRatio rule would call this pull cold."""
        if not self.enabled:
            return
        writer = self.writer
        writer.add(C.PULL_PAGES, pages)
        if cold_pages:
            writer.add(C.PULL_PAGES_COLD, cold_pages)
            writer.add(C.PULLS_COLD)
        if java_in_disk:
            writer.add(C.PULLS_IN_DISK)
        writer.record(H.PULL_READ_US, read_ns // 1000)

    def pull_offset(self, topic: str, group: str, queue_id: int, next_offset: int,
                    at_ns: int) -> None:
        """A pull of ``queue_id`` answered with ``next_offset`` as its next begin offset
        (Java's commitPullOffset: the consumer holds everything below it); ``at_ns`` is the
        pull's CLOCK_MONOTONIC start, so a reader keeps the newest of several workers'."""
        if not self.enabled:
            return
        self.writer.key_set_words(self.pull_offset_entry(topic, group, queue_id),
                                  max(next_offset, 0), at_ns)

    def pull_offset_entry(self, topic: str, group: str, queue_id: int) -> int:
        """The KEY_PULL_OFFSET entry of ``queue_id`` of ``topic@group`` in this writer's key
        table (-1: not tracked, beyond PULL_OFFSET_KEYS_MAX or a full table); the pull fast
        path sets the same entry (pybroker/_fast/pull_path.pyx)."""
        key = (queue_id, f"{topic}@{group}")
        entry = self._pull_offset_keys.get(key)
        if entry is None:
            entry = (self.writer.key(K.KEY_PULL_OFFSET, queue_id, key[1])
                     if len(self._pull_offset_keys) < PULL_OFFSET_KEYS_MAX else -1)
            if entry >= 0:
                self._pull_offset_keys[key] = entry
        return entry

    def send_back(self, topic: str, group: str) -> None:
        """A consumer sent a message back (SNDBCK_PUT_NUMS)."""
        if not self.enabled:
            return
        writer = self.writer
        writer.key_add(writer.key(K.KEY_SEND_BACK, 0, f"{topic}@{group}"), 1)
        writer.add(C.SEND_BACK_MESSAGES)

    def pop_checkpoint(self, topic: str, group: str) -> None:
        """A POP check-point record stored for ``topic`` (the topic the request named, as
        Java counts it): GROUP_CK_NUMS and BROKER_CK_NUMS."""
        if not self.enabled:
            return
        writer = self.writer
        writer.key_add(writer.key(K.KEY_GROUP_CK, 0, f"{topic}@{group}"), 1)
        writer.add(C.BROKER_CK_NUMS)

    def pop_ack(self, topic: str, group: str, acks: int, stored: bool) -> None:
        """An ack record of ``acks`` acks for ``topic`` put (GROUP_ACK_NUMS, BROKER_ACK_NUMS
        count the acks whatever the put's outcome, as Java; ``stored``: the record was)."""
        if not self.enabled:
            return
        writer = self.writer
        entry = writer.key(K.KEY_GROUP_ACK, 0, f"{topic}@{group}")
        writer.key_add(entry, acks, 1 if stored else 0)
        writer.add(C.BROKER_ACK_NUMS, acks)

    # The clock of request latencies (time.monotonic_ns itself: no Python frame per call).
    now_ns = staticmethod(time.monotonic_ns)
