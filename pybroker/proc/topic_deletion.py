# Topic deletion across the data plane: supervisor -> appender -> dispatcher handshake.
"""How DELETE_TOPIC_IN_BROKER reaches the single writers of the queue offsets and the queues.

The metadata service (supervisor) deletes the topic config; the consume-queue files belong to
the dispatcher and the topic-queue offset table to the appender. Both must switch at the SAME
CommitLog position: records appended before it carry the old queue offsets and must still be
dispatched into the old queue (or be dropped with it), records after it start at queue offset 0.

Handshake (one request in flight at a time; control-block fields, release/acquire):

1. supervisor: appends ``"<seq>\\t<topic>\\n"`` lines to ``<store>/run/topic-deletions``, then
   publishes ``topic_deletion_requested = seq`` and signals the appender.
2. appender, between two drains (so its CommitLog end W equals the published
   ``written_position``): drops the topics' entries of its offset table, stores
   ``topic_deletion_offset = W``, then publishes ``topic_deletion_appended = seq`` and signals
   the dispatcher.
3. dispatcher: loads ``written_position`` BEFORE ``topic_deletion_appended`` (a position past W
   implies the request is visible), dispatches no further than W while the request is pending,
   and at W destroys the topics' consume queues and publishes ``topic_deletion_done = seq``.
4. readers see ``topic_deletion_done`` move and forget every consume queue they mapped (they
   reopen lazily); the supervisor answers the admin request once ``done`` reached ``seq``.

The file and the sequence numbers live for one generation (the supervisor recreates the control
block): a request pending when a worker dies is lost, and the topic's files then stay until
they expire with the CommitLog.
"""
import asyncio
import logging
import os
import time
from collections.abc import Sequence

from pybroker.store import paths
from pybroker.store.control_block import ControlBlock

__all__ = ["TopicDeletionRequests", "requests_path", "read_requested_topics",
           "DispatcherDeletions"]

log = logging.getLogger("pybroker.proc.topic_deletion")

REQUESTS_FILE_NAME = "topic-deletions"
_POLL_INTERVAL_S = 0.002
DELETION_TIMEOUT_S = 10.0


def requests_path(store_root: str) -> str:
    """The request file of a store's run directory."""
    return os.path.join(paths.run_dir(store_root), REQUESTS_FILE_NAME)


def read_requested_topics(path: str, after_seq: int, up_to_seq: int) -> list[str]:
    """Topics of the requests with ``after_seq < seq <= up_to_seq`` (empty when the file is
    gone: the generation is ending)."""
    try:
        with open(path, encoding="utf-8") as requests:
            lines = requests.read().splitlines()
    except FileNotFoundError:
        return []
    topics = []
    for line in lines:
        seq_text, _, topic = line.partition("\t")
        if seq_text.isdigit() and after_seq < int(seq_text) <= up_to_seq and topic:
            topics.append(topic)
    return topics


class TopicDeletionRequests:
    """Supervisor side: :meth:`delete` submits topics and waits until the dispatcher deleted
    their queues. Creating it empties the request file of this generation."""

    def __init__(self, path: str, control: ControlBlock, appender_wake):
        self.path = path
        self.control = control
        self.appender_wake = appender_wake
        self.seq = control.topic_deletion_requested
        self._lock = asyncio.Lock()
        with open(path, "w", encoding="utf-8"):
            pass

    async def delete_topics(self, topics: Sequence[str],
                            timeout_s: float = DELETION_TIMEOUT_S) -> bool:
        """Delete the consume queues of ``topics`` in the data plane; False when the data
        plane did not answer within ``timeout_s`` seconds."""
        topics = [topic for topic in topics if topic]
        if not topics:
            return True
        async with self._lock:
            await self._wait_done(self.seq, timeout_s)
            seq = self.seq + 1
            with open(self.path, "a", encoding="utf-8") as requests:
                requests.write("".join(f"{seq}\t{topic}\n" for topic in topics))
            self.seq = seq
            self.control.publish("topic_deletion_requested", seq)
            self.appender_wake.signal()
            if await self._wait_done(seq, timeout_s):
                return True
        log.error("topic deletion %d (%s) not done by the data plane within %.0f s", seq,
                  ",".join(topics), timeout_s)
        return False

    async def _wait_done(self, seq: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.control.topic_deletion_done < seq:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(_POLL_INTERVAL_S)
        return True


class DispatcherDeletions:
    """Dispatcher side of the handshake: bounds the dispatch target and applies deletions."""

    def __init__(self, path: str, control: ControlBlock):
        self.path = path
        self.control = control
        self.done = control.topic_deletion_done
        self.pending_seq = self.done
        self.pending_offset = -1

    def target(self, written_position: int) -> int:
        """How far to dispatch: ``written_position`` (loaded by the caller BEFORE this call),
        or the position of a pending deletion."""
        if self.pending_seq == self.done:
            appended = self.control.topic_deletion_appended
            if appended == self.done:
                return written_position
            self.pending_seq = appended
            self.pending_offset = self.control.topic_deletion_offset
        return min(written_position, self.pending_offset)

    def apply_if_reached(self, reput_from_offset: int, queues, dispatcher,
                         on_deleted=None) -> int:
        """At the pending position, destroy the topics' queues; returns topics deleted.
        ``on_deleted()`` runs after the deletion, before it is published."""
        if self.pending_seq == self.done or reput_from_offset < self.pending_offset:
            return 0
        topics = read_requested_topics(self.path, self.done, self.pending_seq)
        dispatcher.release_files()          # before the queues' files are closed
        for topic in topics:
            queues.delete_topic(topic)
        dispatcher.forget_queues()
        if on_deleted is not None:
            on_deleted()
        log.info("deleted the consume queues of %s at physical offset %d", ",".join(topics),
                 self.pending_offset)
        self.done = self.pending_seq
        self.control.publish("topic_deletion_done", self.done)
        return len(topics)
