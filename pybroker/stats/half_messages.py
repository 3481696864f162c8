# rocketmq_half_messages: half messages not finished yet, per real topic, kept across restarts.
"""Java 5.x's TransactionMetrics, incrementally: the counts a broker found in
``config/transactionMetrics`` when it started, plus what the region counted since (half
messages prepared, minus those committed, rolled back or discarded by the check; the
``KEY_TRANSACTION`` entries of every writer). The supervisor writes the sum back every few
seconds and at a clean stop in Java's format, so a restart (and a Java broker opening the
store) continues from it; as in Java, what changed after the last write before a crash is
lost from the figure, not from the store.
"""
from pybroker import clock
from pybroker.stats.metric_names import TransactionEvent
from pybroker.stats.region import Snapshot
from pybroker._fast.stats import StatsKeyKind as K
from pybroker.store.config_docs import (TransactionMetricsDocument, load_json_document,
                                        save_json_document)

__all__ = ["HalfMessages"]

_SIGN = {TransactionEvent.PREPARED: 1, TransactionEvent.COMMITTED: -1,
         TransactionEvent.ROLLED_BACK: -1, TransactionEvent.DISCARDED: -1}


class HalfMessages:
    """The half-message counts of one broker run (``path``: its config/transactionMetrics)."""

    def __init__(self, path: str):
        self.path = path
        self.start = load_json_document(path, TransactionMetricsDocument.from_json,
                                        TransactionMetricsDocument)
        self._written: dict[str, int] | None = None

    def counts(self, snapshot: Snapshot) -> dict[str, int]:
        """{real topic: half messages not finished} now (never below 0)."""
        counts = {topic: count for topic, (count, _) in self.start.counts.items()}
        for (kind, label, topic), words in snapshot.labelled_keys().items():
            if kind == K.KEY_TRANSACTION and label in _SIGN:
                counts[topic] = counts.get(topic, 0) + _SIGN[TransactionEvent(label)] * int(
                    words[0])
        return {topic: max(count, 0) for topic, count in counts.items()}

    def persist(self, snapshot: Snapshot) -> None:
        """Write the current counts (only when they changed since the last write)."""
        counts = self.counts(snapshot)
        if counts == self._written:
            return
        now = clock.now_ms()
        stamps = {topic: stamp for topic, (_, stamp) in self.start.counts.items()}
        document = TransactionMetricsDocument(
            {topic: (count, stamps.get(topic, 0) if self._unchanged(topic, count) else now)
             for topic, count in counts.items()},
            self.start.data_version, self.start.extra)
        document.data_version.next_version()
        save_json_document(self.path, document.to_json())
        self._written = counts

    def _unchanged(self, topic: str, count: int) -> bool:
        previous = self.start.counts.get(topic)
        return previous is not None and previous[0] == count
