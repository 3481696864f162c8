# Tests of SQL92 filtering in the pull handler and in long polling, over a real store.
"""Goal: with enablePropertyFilter=true a pull delivers exactly the messages its SQL92 selector
matches (from the pull itself or from the consumer's heartbeat), skips the others as Java does
(not counted, nextBeginOffset past them), refuses bad selectors with Java's codes, leaves the
retry topic unfiltered, and a held pull is answered only when a matching message arrives or
its time is up. Method: the real pull handler, MessageStore and MetadataState on tmp_path
(test_pull's Broker), messages with chosen properties put through the store, a LongPollService
on one asyncio loop with bounded waits.
"""
import asyncio

import pytest

from pybroker._fast import record as record_codec
from pybroker.broker import pull
from pybroker.broker.long_poll import LongPollService
from pybroker.broker.managers.client_channel import make_channel_info
from pybroker.protocol import constants
from pybroker.protocol.bodies import build_subscription
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.properties import encode_properties
from pybroker.store.config_docs import TopicConfig
from tests.unit.broker.test_pull import (GROUP, HOST, TOPIC, Broker, bodies_of, header_longs,
                                         java_pull)

WAIT_S = 5.0
RETRY_TOPIC = constants.RETRY_GROUP_TOPIC_PREFIX + GROUP
MESSAGES = ((b"m0", {"a": "1", "TAGS": "TagA"}), (b"m1", {"a": "7", "TAGS": "TagB"}),
            (b"m2", {"a": "abc"}), (b"m3", {"b": "x"}), (b"m4", {"a": "12", "TAGS": "TagA"}))


def put(broker, body: bytes, properties: dict, topic: str = TOPIC) -> None:
    encoded = encode_properties(properties).encode()
    buffer = bytearray(record_codec.encoded_size(len(body), len(topic), len(encoded), 0))
    record_codec.encode_into(buffer, 0, topic.encode(), 0, 0, body, encoded, 0,
                             1_700_000_000_000, HOST, 40000, HOST, 10911)
    assert broker.store.put_messages(buffer, topic, 0, 1, 0).status.stored


def register_sql(broker, expression: str, sub_version: int = 1_700_000_000_000) -> None:
    subscriptions = [build_subscription(TOPIC, expression, "SQL92", sub_version),
                     build_subscription(RETRY_TOPIC, "*", "TAG", sub_version)]
    broker.metadata.consumers.register_consumer(
        GROUP, make_channel_info(broker.channel, "127.0.0.1@1", 0),
        constants.ConsumeType.CONSUME_PASSIVELY, constants.MessageModel.CLUSTERING,
        constants.ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, subscriptions)
    broker.sent.clear()


def lite_pull(queue_offset: int, expression: str, sys_flag: int = 0x14, **extra):
    """A lite pull (code 361) carrying its own expression; ``extra`` sets more ext fields."""
    return java_pull(queue_offset, sys_flag=sys_flag, code=RequestCode.LITE_PULL_MESSAGE,
                     subscription=expression, **extra)


def sql_pull(queue_offset: int, expression: str):
    return lite_pull(queue_offset, expression, expressionType="SQL92")


@pytest.fixture
def broker(tmp_path):
    created = Broker(tmp_path, {"enablePropertyFilter": "true"})
    for body, properties in MESSAGES:
        put(created, body, properties)
    yield created
    created.close()


def test_pull_selector_delivers_only_matches(broker):
    response = broker.pull(sql_pull(0, "a > 5"))
    assert response.code == ResponseCode.SUCCESS
    # m2 ("abc" is no integer: Java's evaluation throws) and m3 (no a) are skipped.
    assert bodies_of(response.body) == [b"m1", b"m4"]
    assert header_longs(response)["next"] == 5


def test_tags_are_a_property(broker):
    response = broker.pull(sql_pull(0, "TAGS = 'TagA' OR b IS NOT NULL"))
    assert bodies_of(response.body) == [b"m0", b"m3", b"m4"]


def test_nothing_matching_retries_immediately_past_the_scanned_units(broker):
    response = broker.pull(sql_pull(0, "a = 99"))
    assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert response.remark == "NO_MATCHED_MESSAGE" and header_longs(response)["next"] == 5


def test_batch_counts_only_matches(broker):
    response = broker.pull(lite_pull(0, "a IS NOT NULL", expressionType="SQL92",
                                     maxMsgNums="2"))
    assert bodies_of(response.body) == [b"m0", b"m1"]
    assert header_longs(response)["next"] == 2


def test_heartbeat_selector_filters_push_pulls(broker):
    register_sql(broker, "a BETWEEN 1 AND 10")
    response = broker.pull(java_pull(0))
    assert bodies_of(response.body) == [b"m0", b"m1"]


def test_bad_selectors_refused_with_java_codes(broker):
    register_sql(broker, "a >")
    refused = broker.pull(java_pull(0))
    assert refused.code == ResponseCode.FILTER_DATA_NOT_EXIST
    assert refused.remark == ("The broker's consumer filter data is not exist!Your expression "
                              "may be wrong!")
    refused = broker.pull(sql_pull(0, "a >"))
    assert refused.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    refused = broker.pull(lite_pull(0, "x", expressionType="NOPE"))
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert refused.remark == "The broker does not support consumer to filter message by NOPE"


def test_retry_topic_is_not_filtered(broker):
    broker.metadata.topics.update_topic_config(TopicConfig(RETRY_TOPIC, read_queue_nums=1,
                                                           write_queue_nums=1))
    register_sql(broker, "a = 99")
    put(broker, b"retried", {"a": "1"}, RETRY_TOPIC)
    response = broker.pull(java_pull(0, topic=RETRY_TOPIC))
    assert bodies_of(response.body) == [b"retried"]


def test_held_pull_wakes_only_for_a_matching_arrival(tmp_path):
    broker = Broker(tmp_path, {"enablePropertyFilter": "true"})
    service = LongPollService(broker.store.get_max_offset_in_queue)
    broker.ctx.long_poll = service
    arrived = asyncio.Event()
    broker.channel.send = lambda command: (broker.sent.append(command), arrived.set())

    async def scenario():
        request = lite_pull(0, "a > 5", sys_flag=0x16, expressionType="SQL92",
                            suspendTimeoutMillis="15000")
        assert await pull.handle_pull_message(broker.ctx, broker.channel, request) is None
        put(broker, b"no", {"a": "1"})
        service.notify_queues([(TOPIC, 0)])
        await asyncio.sleep(0.2)      # the re-run finds no match and parks again
        assert broker.sent == [] and service.held_count == 1
        put(broker, b"yes", {"a": "6"})
        service.notify_queues([(TOPIC, 0)])
        await asyncio.wait_for(arrived.wait(), WAIT_S)
        [response] = broker.sent
        assert bodies_of(response.body) == [b"yes"] and header_longs(response)["next"] == 2
        assert service.held_count == 0
    try:
        asyncio.run(scenario())
    finally:
        service.close()
        broker.close()


def test_held_pull_answers_at_its_deadline_without_a_match(tmp_path):
    broker = Broker(tmp_path, {"enablePropertyFilter": "true"})
    service = LongPollService(broker.store.get_max_offset_in_queue)
    broker.ctx.long_poll = service
    arrived = asyncio.Event()
    broker.channel.send = lambda command: (broker.sent.append(command), arrived.set())

    async def scenario():
        request = lite_pull(0, "a > 5", sys_flag=0x16, expressionType="SQL92",
                            suspendTimeoutMillis="300")
        assert await pull.handle_pull_message(broker.ctx, broker.channel, request) is None
        put(broker, b"no", {"a": "1"})
        service.notify_queues([(TOPIC, 0)])
        await asyncio.wait_for(arrived.wait(), WAIT_S)
        [response] = broker.sent
        assert response.code in (ResponseCode.PULL_NOT_FOUND,
                                 ResponseCode.PULL_RETRY_IMMEDIATELY)
        assert header_longs(response)["next"] == 1    # past the refused message
    try:
        asyncio.run(scenario())
    finally:
        service.close()
        broker.close()
