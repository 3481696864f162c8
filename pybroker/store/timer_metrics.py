# The timer metrics (Java 5.x config/timermetrics): messages parked per real topic.
"""``<root>/config/timermetrics`` and the body of GET_TIMER_METRICS (61), as Java writes them::

    {"dataVersion":{"counter":17,"stateVersion":0,"timestamp":1796473942148},
     "timingCount":{"TimerT":{"count":1,"timeStamp":1796473942148}}}

A topic's count goes up when a message for it is parked in the wheel and down when it is
delivered or a cancel mark is parked (Java TimerMetrics.addAndGet); each change moves the data
version. Single writer: the timer worker (a slave's worker also takes the master's document,
Java SlaveSynchronize.syncTimerMetrics). Saved with the safe-write steps of
:mod:`pybroker.store.config_docs`; readers (GET_TIMER_METRICS, the metrics endpoint) load the
file.
"""
import dataclasses

import orjson

from pybroker import clock
from pybroker.store import config_docs
from pybroker.store.config_docs import DataVersion

__all__ = ["TimerMetrics", "TopicMetric", "load_timer_metrics", "save_timer_metrics",
           "SYSTEM_TOPIC_PREFIX", "LMQ_PREFIX"]

SYSTEM_TOPIC_PREFIX = "rmq_sys_"
LMQ_PREFIX = "%LMQ%"


@dataclasses.dataclass
class TopicMetric:
    """``count`` messages parked for a topic, ``time_stamp`` (ms) of the last change."""
    count: int = 0
    time_stamp: int = dataclasses.field(default_factory=clock.now_ms)


@dataclasses.dataclass
class TimerMetrics:
    """The document: ``timing_count`` per real topic and its ``data_version``."""
    timing_count: dict[str, TopicMetric] = dataclasses.field(default_factory=dict)
    data_version: DataVersion = dataclasses.field(
        default_factory=lambda: DataVersion(counter=0, state_version=0))

    def add(self, topic: str, value: int) -> int:
        """Java addAndGet: the topic's count += value; the version moves. Returns the count."""
        self.data_version.next_version()
        self.data_version.state_version = 0
        metric = self.timing_count.get(topic)
        if metric is None:
            metric = self.timing_count[topic] = TopicMetric(0)
        metric.time_stamp = self.data_version.timestamp
        metric.count += value
        return metric.count

    def count(self, topic: str) -> int:
        """Messages parked for ``topic`` (0 when unknown)."""
        metric = self.timing_count.get(topic)
        return 0 if metric is None else metric.count

    def clean(self, topics) -> list[str]:
        """Drop the counts of topics not in ``topics`` (system and LMQ topics stay), Java
        cleanMetrics; returns the dropped names."""
        dropped = [topic for topic in self.timing_count
                   if not topic.startswith((SYSTEM_TOPIC_PREFIX, LMQ_PREFIX))
                   and topic not in topics]
        for topic in dropped:
            del self.timing_count[topic]
        return dropped

    def replace(self, other: "TimerMetrics") -> bool:
        """A slave takes its master's document when the versions differ; True when taken."""
        if self.data_version == other.data_version:
            return False
        self.data_version = dataclasses.replace(other.data_version)
        self.timing_count = {topic: dataclasses.replace(metric)
                             for topic, metric in other.timing_count.items()}
        return True

    @classmethod
    def from_json(cls, value: dict) -> "TimerMetrics":
        counts = value.get("timingCount") or {}
        if not isinstance(counts, dict):
            raise ValueError("timingCount is not an object")
        table = {}
        for topic, metric in counts.items():
            if not isinstance(metric, dict):
                raise ValueError(f"timingCount[{topic!r}] is not an object")
            table[str(topic)] = TopicMetric(int(metric.get("count", 0)),
                                            int(metric.get("timeStamp", 0)))
        version = DataVersion.from_json(value.get("dataVersion"))
        if version.state_version is None:
            version.state_version = 0
        return cls(table, version)

    def to_json(self) -> dict:
        """Java's field names, in fastjson's (sorted) order."""
        version = self.data_version
        return {"dataVersion": {"counter": version.counter,
                                "stateVersion": version.state_version or 0,
                                "timestamp": version.timestamp},
                "timingCount": {topic: {"count": metric.count, "timeStamp": metric.time_stamp}
                                for topic, metric in self.timing_count.items()}}

    def encode(self) -> bytes:
        """The compact body of GET_TIMER_METRICS (Java's toJson(false))."""
        return orjson.dumps(self.to_json())


def load_timer_metrics(path: str) -> TimerMetrics:
    """The document at ``path`` (its ``.bak`` when unusable; empty when neither exists)."""
    return config_docs.load_json_document(path, TimerMetrics.from_json, TimerMetrics)


def save_timer_metrics(path: str, metrics: TimerMetrics) -> None:
    """Safely write the document (config_docs' safe-write steps)."""
    config_docs.save_json_document(path, metrics.to_json())
