# The Python client's ConsumeStatus figures follow Java's ConsumerStatsManager windows.
"""Goal: pullTPS / pullRT / consumeOKTPS / consumeRT / consumeFailedTPS / consumeFailedMsgs are
computed as Java computes them (minute window tps or avgpt, failed messages' hour sum).
Method: a ConsumerStats on a hand-driven clock; expectations worked out from Java's StatsItem
(a zero snapshot one period back when an item appears, then one snapshot per 10 s)."""
from pybroker.client.consume_stats import ConsumerStats


def test_status_follows_the_minute_and_hour_windows():
    clock = [1_000_000]
    stats = ConsumerStats(clock_ms=lambda: clock[0])
    assert stats.status("T")["pullTPS"] == 0.0
    for _ in range(3):                 # one pull of 32 and one batch of 32 per 10 s
        stats.pulled("T", 4, 32)
        stats.consumed("T", 2, 30, 2)
        clock[0] += 10_000
    status = stats.status("T")
    # Snapshots at 990 s (zero), 1000 s (before the first add: 0), 1010, 1020 and now 1030 s:
    # every add but the last lands in a snapshot: 96 messages over 40 s.
    assert status["pullTPS"] == 96 * 1000 / 40_000
    assert status["pullRT"] == 4.0 and status["consumeRT"] == 2.0
    assert status["consumeOKTPS"] == 90 * 1000 / 40_000
    assert status["consumeFailedTPS"] == 6 * 1000 / 40_000
    # Hour window: sampled at creation (zero) and not again for 10 minutes.
    assert status["consumeFailedMsgs"] == 0
    clock[0] += 600_000
    assert stats.status("T")["consumeFailedMsgs"] == 6
