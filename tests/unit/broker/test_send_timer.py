"""The send fast path's timer rule (send/timer.pyx) decides every timer send it takes exactly as
the handler's (broker/timer_message.py redirect_timer, send.py recall_handle_of), and leaves it
only the refusals and the rarer shapes; the handler's congestion rule reads the real wheel.

Method: seeded random properties strings built from the timer's properties and values around
the edges (past, now, exact precision multiples, beyond timerMaxDelaySec, Java long limits and
their wrap, signs, not-a-number), under several timer settings and a fixed clock, go through
both: what the C rule parks must be what the handler parks (the stored properties and the recall
handle byte for byte), what it stores as it is the handler stores as it is, and what it hands
over the handler must refuse or be one of the listed shapes. The whole table of sends, stored
records and answers is in test_send_fast.py. The handler's rules follow a live settings
change (send.timer_rules keeps them per StoreConfig).
"""
import random
from types import SimpleNamespace

import pytest

from pybroker._fast.send import read, timer
from pybroker.broker import send, timer_message
from pybroker.broker.timer_message import TimerRefused, TimerRules
from pybroker.broker.timer_slots import slot_counts_of
from pybroker.config import load_broker_config, with_broker_settings
from pybroker.protocol.properties import encode_properties
from pybroker.store import paths
from pybroker.store.timer_wheel import TimerWheel

NOW_MS = 1_764_900_000_123
TOPIC, QUEUE_ID, BROKER = "TopicTest", 3, "broker-a"
_LONG_MAX = (1 << 63) - 1
_VALUES = [str(NOW_MS + 5000), str(NOW_MS - 1), str(NOW_MS), str(NOW_MS + 1),
           str((NOW_MS // 1000 + 7) * 1000), str(NOW_MS + 3 * 86_400_000),
           str(NOW_MS + 3 * 86_400_000 + 1), "+" + str(NOW_MS + 60_000), "-5", "0", "1", "60",
           "259200", "259201", "7", "x", "12a", "+", str(_LONG_MAX), str(_LONG_MAX + 1),
           str(-_LONG_MAX - 1), str(-_LONG_MAX - 2), "9223372036854775", "00042", "1000"]
_NAMES = ["TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"]
_OTHERS = [("UNIQ_KEY", "7F0000010F2A18B4AAC2"), ("WAIT", "true"), ("WAIT", "false"),
           ("KEYS", "k1"), ("TAGS", "TagA"), ("TIMER_DEL_UNIQKEY", "TopicTest+ABC"),
           ("REAL_TOPIC", "X"), ("REAL_QID", "1"), ("TIMER_OUT_MS", "5"), ("UNIQ_KEY", "")]
_SETTINGS = [TimerRules(), TimerRules(precision_ms=100), TimerRules(precision_ms=500),
             TimerRules(max_delay_sec=60), TimerRules(wheel_enable=False),
             TimerRules(congest_num_each_slot=10)]


def _properties(rand: random.Random) -> str:
    pairs = {}
    for name in rand.sample(_NAMES, rand.randrange(1, 4)):
        pairs[name] = rand.choice(_VALUES)
    for name, value in rand.sample(_OTHERS, rand.randrange(0, 5)):
        pairs.setdefault(name, value)
    if rand.random() < 0.8:
        pairs.setdefault("UNIQ_KEY", "AB%04d" % rand.randrange(10_000))
    items = list(pairs.items())
    rand.shuffle(items)
    return "".join(f"{name}\x01{value}\x02" for name, value in items)


def _handler(text: str, rules: TimerRules) -> tuple:
    """What the handler does: ("refused", status) / ("as is",) / ("parked", stored, handle)."""
    properties = send.parse_properties(text)
    before = dict(properties)
    try:
        topic, queue_id = timer_message.redirect_timer(TOPIC, QUEUE_ID, properties, rules,
                                                       NOW_MS)
    except TimerRefused as refused:
        return ("refused", refused.status)
    if topic == TOPIC:
        assert (queue_id, properties) == (QUEUE_ID, before)
        return ("as is",)
    assert (topic, queue_id) == (timer_message.TIMER_TOPIC, 0)
    handle = send.recall_handle_of(properties, BROKER)
    return ("parked", encode_properties(properties).encode(), handle.encode())


def _rarer_shape(text: str, rules: TimerRules) -> bool:
    """A shape the fast path leaves to the handler though it is not refused."""
    properties = send.parse_properties(text)
    return "UNIQ_KEY" not in properties or "REAL_TOPIC" in properties \
        or "REAL_QID" in properties or "TIMER_OUT_MS" in properties \
        or rules.congest_num_each_slot < timer_message.CONGEST_NEVER


@pytest.mark.parametrize("rules", _SETTINGS, ids=lambda rules: repr(rules)[10:60])
def test_the_fast_rule_is_the_handler_rule(rules):
    rand = random.Random(20261205)
    outcomes = {"parked": 0, "as is": 0, "refused": 0, "handler": 0}
    for _ in range(1500):
        text = _properties(rand)
        scanned = read.scan(text.encode())
        assert scanned is not None and scanned[1] == 8, text    # PROPERTY_HAS_TIMER alone
        outcome, stored, handle = timer.redirect(
            text.encode(), TOPIC.encode(), QUEUE_ID, rules.wheel_enable,
            rules.max_delay_sec * 1000, rules.precision_ms,
            rules.congest_num_each_slot < timer_message.CONGEST_NEVER, NOW_MS, BROKER.encode())
        handler = _handler(text, rules)
        if outcome == 1:
            assert handler == ("parked", stored, handle), text
            outcomes["parked"] += 1
        elif outcome == 0:
            assert handler == ("as is",), text
            outcomes["as is"] += 1
        else:
            assert outcome == -1
            assert handler[0] == "refused" or _rarer_shape(text, rules), (text, handler)
            outcomes["refused" if handler[0] == "refused" else "handler"] += 1
    if rules.wheel_enable and rules.congest_num_each_slot == timer_message.CONGEST_NEVER:
        assert min(outcomes.values()) > 20, outcomes      # the seed reaches every branch
    else:
        assert outcomes["parked"] == 0, outcomes


def test_recall_handles_of_every_length_decode():
    """The C Base64 (with its in-place encode) gives the handle parse_recall_handle reads, for
    every padding and UNIQ_KEY length."""
    for length in range(1, 40):
        uniq = "U" * length
        text = f"TIMER_DELIVER_MS\x01{NOW_MS + 10_000}\x02UNIQ_KEY\x01{uniq}\x02".encode()
        outcome, _, handle = timer.redirect(text, b"T", 0, True, 86_400_000, 1000, False,
                                            NOW_MS, b"b" * (length % 5))
        assert outcome == 1
        parsed = timer_message.parse_recall_handle(handle.decode())
        assert (parsed.topic, parsed.broker_name, parsed.message_id) == ("T", "b" * (length % 5),
                                                                        uniq)
        assert int(parsed.timestamp) == (NOW_MS + 10_000) // 1000 * 1000 + 1


def test_the_congestion_rule_reads_the_wheel(tmp_path):
    """A remoting worker's congestion rule (timerCongestNumEachSlot) reads the parked count of
    the slot from the timer worker's timerwheel, mapped read-only: a slot holding twice the
    limit refuses WHEEL_TIMER_FLOW_CONTROL, an empty one (or one of another lap) parks; with
    the default limit nothing is mapped."""
    settings = {"storePathRootDir": str(tmp_path), "timerCongestNumEachSlot": "10"}
    store = load_broker_config(None, settings).store
    counts = slot_counts_of(store)
    assert counts is not None and counts(NOW_MS) == 0      # no wheel yet: empty
    assert slot_counts_of(load_broker_config(None, {"storePathRootDir": str(tmp_path)}
                                             ).store) is None
    wheel = TimerWheel(paths.timer_wheel_path(str(tmp_path)), store.timer_precision_effective_ms)
    full_ms = (NOW_MS // 1000 + 30) * 1000
    wheel.put_slot(full_ms, 0, 0, num=20)
    wheel.put_slot(full_ms + 1000, 0, 0, num=3)
    assert (counts(full_ms), counts(full_ms + 1000), counts(full_ms + 2000)) == (20, 3, 0)
    rules = TimerRules.of(store, counts)

    def park(deliver_ms: int):
        properties = {"TIMER_DELIVER_MS": str(deliver_ms), "UNIQ_KEY": "U"}
        return timer_message.redirect_timer(TOPIC, 0, properties, rules, NOW_MS)
    with pytest.raises(TimerRefused, match="WHEEL_TIMER_FLOW_CONTROL"):
        park(full_ms + 500)
    assert park(full_ms + 1500) == (timer_message.TIMER_TOPIC, 0)
    # A full slot of another lap (same index, other time) does not count.
    lap_ms = full_ms + 2 * 604_800 * 1000
    assert counts(lap_ms) == 0
    wheel.close()


def test_a_congestion_limit_parks_in_c_at_or_under_it(tmp_path):
    """timerCongestNumEachSlot set: the fast rule reads the wheel map the handler's rule reads
    (WheelSlotCounts.follow hands it over once the timer worker made the file); a slot at or
    under the limit parks in C exactly as the handler parks it, a slot over it (or no map yet)
    is the handler's, which refuses WHEEL_TIMER_FLOW_CONTROL from twice the limit; a full slot
    of another lap counts nothing."""
    limit = 10
    settings = {"storePathRootDir": str(tmp_path), "timerCongestNumEachSlot": str(limit)}
    store = load_broker_config(None, settings).store
    counts = slot_counts_of(store)
    assert counts is not None
    views: list = []
    counts.follow(views.append)
    assert views == []                                  # no wheel file yet
    rules = TimerRules.of(store, counts)

    def text(deliver_ms: int) -> str:
        return f"TIMER_DELIVER_MS\x01{deliver_ms}\x02UNIQ_KEY\x01U1\x02"

    def fast(deliver_ms: int) -> tuple:
        return timer.redirect(text(deliver_ms).encode(), TOPIC.encode(), QUEUE_ID, True,
                              rules.max_delay_sec * 1000, rules.precision_ms, True, NOW_MS,
                              BROKER.encode(), limit, views[0] if views else None)
    base = (NOW_MS // 1000 + 30) * 1000
    assert fast(base + 500)[0] == -1                    # no map yet: the handler's
    wheel = TimerWheel(paths.timer_wheel_path(str(tmp_path)), store.timer_precision_effective_ms)
    nums = [0, limit - 1, limit, limit + 1, 2 * limit]
    for step, num in enumerate(nums):
        wheel.put_slot(base + step * 1000, 0, 0, num=num)
    other_lap = base + len(nums) * 1000 + 2 * 604_800 * 1000
    wheel.put_slot(other_lap, 0, 0, num=5 * limit)
    assert counts(base + 1000) == limit - 1 and len(views) == 1   # mapped, follower told
    for step, num in enumerate([*nums, 0]):
        deliver = base + step * 1000 + 500
        outcome, stored, handle = fast(deliver)
        if num <= limit:
            assert outcome == 1, (step, num)
            assert _handler(text(deliver), rules) == ("parked", stored, handle)
        else:
            assert outcome == -1, (step, num)
    assert _handler(text(base + 4500), rules) == ("refused", "WHEEL_TIMER_FLOW_CONTROL")
    views.clear()
    wheel.close()


def test_timer_rules_follow_a_live_settings_change():
    """send.timer_rules keeps the rules it made while the StoreConfig (frozen) and the wheel
    reader are the same objects; a live change (a new StoreConfig) or another reader makes new
    ones."""
    config = load_broker_config(None, {"timerMaxDelaySec": "60"})
    ctx = SimpleNamespace(config=config, timer_slot_num=None)
    first = send.timer_rules(ctx)
    assert first.max_delay_sec == 60 and send.timer_rules(ctx) is first
    ctx.config = with_broker_settings(config, {"timerMaxDelaySec": "120",
                                               "timerPrecisionMs": "500"})
    changed = send.timer_rules(ctx)
    assert (changed.max_delay_sec, changed.precision_ms) == (120, 500)
    ctx.timer_slot_num = lambda slot_ms: 0
    assert send.timer_rules(ctx).slot_num is ctx.timer_slot_num
