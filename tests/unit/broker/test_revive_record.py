"""The revive records POP writes (broker/pop/revive_log.py) are, byte for byte, what the layered
path wrote before its layers were folded: a PopCheckPoint object, Java's UNIQ_KEY joined from
its parts, the properties as a dict encoded by encode_properties, and the 5.x timer's put-time
rule (broker/timer_message.py redirect_timer) reading TIMER_DELIVER_MS back from that dict.

Method: seeded check-points and acks (names, broker name or none, offsets and diffs, pop times
before and after now, invisible times from 0 to past timerMaxDelaySec and past a Java long)
under seeded timer rules (switched off, precisions, a maximum delay, slots congested below,
between and past their limit, the refusal between drawn from the same seeded random on both
paths) and IPv4/IPv6 store hosts. For each: the POP's record (pop_checkpoint_message, from the
fields), checkpoint_message and ack_message give the reference's bytes, topic, queue id and
refusal; a parked record's properties are the ones redirect_timer writes (TIMER_OUT_MS,
REAL_TOPIC, REAL_QID) and the timer, reading the stored record, parks it for the same slot.
"""
import random
from functools import partial

import orjson
import pytest

from pybroker._fast import record as record_codec
from pybroker.broker import send, timer_message
from pybroker.broker.pop import revive_log
from pybroker.broker.timer_message import (TIMER_TOPIC, TimerRefused, TimerRules,
                                           redirect_timer)
from pybroker.protocol.constants import PopConstants, Property
from pybroker.protocol.properties import decode_properties, encode_properties
from pybroker.store.pop_checkpoint import AckMsg, BatchAckMsg, PopCheckPoint
from pybroker.store.status import PutStatus

NOW_MS = 1_764_900_000_123
REVIVE_TOPIC = "rmq_sys_REVIVE_LOG_DefaultCluster"
_LONG_MAX = (1 << 63) - 1
HOSTS = [(bytes([10, 0, 0, 7]), 10911), (bytes(range(16)), 30911)]
NAMES = ["T", "Topic_%-1", "%RETRY%G_T", "a" * 120, "名字", "x@y"]


def _reference_body(ck: PopCheckPoint) -> bytes:
    """The check-point body as PopCheckPoint.encode wrote it before the fold."""
    fields = {"bm": ck.bit_map & 0xFFFFFFFF}
    if fields["bm"] >= 1 << 31:
        fields["bm"] -= 1 << 32
    if ck.broker_name is not None:
        fields["bn"] = ck.broker_name
    fields["c"] = ck.cid
    if ck.queue_offset_diff is not None:
        fields["d"] = ck.queue_offset_diff
    fields.update({"it": ck.invisible_time, "n": ck.num, "pt": ck.pop_time, "q": ck.queue_id,
                   "reviveTime": ck.revive_time, "ro": ck.revive_offset})
    if ck.re_put_times is not None:
        fields["rp"] = ck.re_put_times
    fields.update({"so": ck.start_offset, "t": ck.topic})
    return orjson.dumps(fields)


def _reference(tag: str, body: bytes, deliver_ms: int, id_parts: tuple, revive_qid: int,
               host, rules: TimerRules) -> tuple:
    """(records, topic, queue id, refused) as the layered path made them."""
    unique_id = PopConstants.SPLIT.join(["null" if part is None else str(part)
                                         for part in id_parts])
    properties = {Property.TAGS: tag, Property.TIMER_DELIVER_MS: str(deliver_ms),
                  Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: unique_id}
    try:
        topic, queue_id = redirect_timer(REVIVE_TOPIC, revive_qid, properties, rules, NOW_MS)
    except TimerRefused as refused:
        return bytes(), REVIVE_TOPIC, revive_qid, PutStatus[refused.status]
    records = send.encode_message(topic, queue_id, 0, body, encode_properties(properties), 0,
                                  NOW_MS, host, host)
    return bytes(records), topic, queue_id, None


def _rules(rng: random.Random) -> TimerRules:
    kind = rng.randrange(6)
    if kind == 0:
        return TimerRules(wheel_enable=False)
    precision = rng.choice([1, 100, 1000, 7])
    max_delay = rng.choice([3 * 24 * 3600, 60, 1, 1 << 62])   # the last: no bound before a long
    if kind == 1:       # congestion: slots below, between and past the limit
        limit = rng.choice([1, 10, 1000])
        counts = [limit - 1, limit, limit + 1, limit * 2 - 1, limit * 2, limit * 3]
        return TimerRules(True, max_delay, precision, limit, lambda slot_ms: counts[slot_ms % 6])
    return TimerRules(True, max_delay, precision)


def _invisible_time(rng: random.Random) -> int:
    return rng.choice([0, 1, 999, 1000, 1001, 1500, 60_000, 61_000, 3 * 24 * 3600 * 1000,
                       3 * 24 * 3600 * 1000 + 2000, _LONG_MAX, rng.randrange(1, 10 ** 7)])


def _pop_time(rng: random.Random) -> int:
    return NOW_MS + rng.choice([0, -1, 1, -5000, 5000, -10 ** 6, rng.randrange(-10 ** 5,
                                                                                10 ** 5)])


def _compare(made: revive_log.ReviveRecord, reference: tuple, rules: TimerRules) -> None:
    records, topic, queue_id, refused = reference
    assert (bytes(made.records), made.topic, made.queue_id, made.refused) == \
        (records, topic, queue_id, refused)
    if topic == TIMER_TOPIC:
        _check_parked(made, rules)


def _check_parked(made: revive_log.ReviveRecord, rules: TimerRules) -> None:
    """The timer parks the stored record for the slot of its own TIMER_DELIVER_MS."""
    decoded = record_codec.decode(memoryview(made.records), 0)
    properties = decode_properties(decoded.properties)
    assert decoded.topic == TIMER_TOPIC and decoded.queue_id == 0
    due_ms = timer_message.deliver_ms(properties, NOW_MS)
    assert int(properties[Property.TIMER_OUT_MS]) == \
        timer_message.slot_of(due_ms, rules.precision_ms)
    assert properties[Property.REAL_TOPIC] == REVIVE_TOPIC
    assert int(properties[Property.REAL_QUEUE_ID]) in range(8)


def _check_point_reference(ck: PopCheckPoint, revive_qid: int, host,
                           rules: TimerRules) -> partial:
    """The layered path's record of ``ck``, to be made."""
    return partial(_reference, PopConstants.CK_TAG, _reference_body(ck),
                   ck.revive_time - PopConstants.ACK_TIME_INTERVAL_MS,
                   (ck.topic, ck.queue_id, ck.start_offset, ck.cid, ck.pop_time,
                    ck.broker_name, PopConstants.CK_TAG), revive_qid, host, rules)


def _both(rng_seed: int, new, old) -> tuple:
    """new() and old() each from the timer rule's random at the same state."""
    timer_message._random.seed(rng_seed)
    made = new()
    timer_message._random.seed(rng_seed)
    return made, old()


@pytest.mark.parametrize("seed", range(6))
def test_check_point_records_are_the_layered_path_s(seed):
    rng = random.Random(seed)
    parked = refused = due = 0
    for case in range(400):
        rules, host = _rules(rng), rng.choice(HOSTS)
        count = rng.randrange(1, 33)
        start = rng.choice([0, 1, 2 ** 31, _LONG_MAX - 40, rng.randrange(10 ** 9)])
        diff = sorted(rng.sample(range(64), count)) if rng.randrange(2) else list(range(count))
        fields = dict(topic=rng.choice(NAMES), cid=rng.choice(NAMES),
                      queue_id=rng.randrange(-1, 300), start_offset=start,
                      pop_time=_pop_time(rng), invisible_time=_invisible_time(rng),
                      broker_name=rng.choice(NAMES))
        revive_qid = rng.randrange(8)
        ck = PopCheckPoint(num=count, queue_offset_diff=diff, **fields)
        made, reference = _both(case, partial(
            revive_log.pop_checkpoint_message, ck.topic, ck.cid, ck.queue_id, ck.start_offset,
            ck.pop_time, ck.invisible_time, diff, ck.broker_name, REVIVE_TOPIC, revive_qid,
            host, rules, NOW_MS), _check_point_reference(ck, revive_qid, host, rules))
        _compare(made, reference, rules)
        # A check-point as revive and CHANGE_INVISIBLETIME write it: any field may be set.
        ck.bit_map = rng.choice([0, 1, 5, (1 << 32) - 1, 1 << 31])
        ck.revive_offset = rng.choice([0, 17, _LONG_MAX])
        ck.re_put_times = rng.choice([None, "1", "x"])
        ck.broker_name = rng.choice([None, "broker-a"])
        ck.queue_offset_diff = rng.choice([None, diff])
        made, again = _both(case, partial(revive_log.checkpoint_message, ck, REVIVE_TOPIC,
                                          revive_qid, host, rules, NOW_MS),
                            _check_point_reference(ck, revive_qid, host, rules))
        _compare(made, again, rules)
        parked += reference[1] == TIMER_TOPIC
        refused += reference[3] is not None
        due += reference[1] == REVIVE_TOPIC and reference[3] is None
    # Every outcome of the rule was met.
    assert parked and refused and due, (parked, refused, due)


@pytest.mark.parametrize("seed", range(4))
def test_ack_records_are_the_layered_path_s(seed):
    rng = random.Random(1000 + seed)
    for case in range(400):
        rules, host = _rules(rng), rng.choice(HOSTS)
        fields = dict(topic=rng.choice(NAMES), consumer_group=rng.choice(NAMES),
                      queue_id=rng.randrange(300), start_offset=rng.randrange(10 ** 6),
                      pop_time=_pop_time(rng), ack_offset=rng.randrange(10 ** 6),
                      broker_name=rng.choice([None, "broker-a"]))
        ack = BatchAckMsg(ack_offsets=[1, 2], **fields) if rng.randrange(3) == 0 else \
            AckMsg(**fields)
        tag = PopConstants.BATCH_ACK_TAG if isinstance(ack, BatchAckMsg) else \
            PopConstants.ACK_TAG
        deliver_ms = ack.pop_time + _invisible_time(rng)
        revive_qid = rng.randrange(8)
        made, again = _both(case, partial(revive_log.ack_message, ack, REVIVE_TOPIC,
                                          revive_qid, deliver_ms, host, rules, NOW_MS),
                            partial(_reference, tag, ack.encode(), deliver_ms,
                                    (ack.topic, ack.queue_id, ack.ack_offset,
                                     ack.consumer_group, ack.pop_time, ack.broker_name,
                                     PopConstants.ACK_TAG), revive_qid, host, rules))
        _compare(made, again, rules)


def test_a_delivery_time_past_a_java_long_is_refused_as_the_property_was():
    rules = TimerRules()
    for due_ms in (_LONG_MAX + 1, -(1 << 63) - 1):
        ck = PopCheckPoint("T", "G", 0, 0, pop_time=due_ms + PopConstants.ACK_TIME_INTERVAL_MS,
                           invisible_time=0, num=1,
                           queue_offset_diff=[0], broker_name="b")
        made = revive_log.checkpoint_message(ck, REVIVE_TOPIC, 0, HOSTS[0], rules, NOW_MS)
        assert made.refused is PutStatus.WHEEL_TIMER_MSG_ILLEGAL
