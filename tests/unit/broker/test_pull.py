# Tests of the PULL_MESSAGE / LITE_PULL_MESSAGE handler over a real store and real metadata.
"""Goal: the pull handler answers every client's pull exactly as the Java broker does (pre-check
codes and remarks in Java's order, the protocol.md §2.3 status rows, the four header longs, tag
filtering, offset piggy-back). Method: a real MessageStore on tmp_path filled through put_messages,
the real MetadataState, and requests built the way Java push (flag 0x3, no subscription), Go
(subVersion 0, empty subscription key) and lite-pull (code 361, flag 0x14/0x16) clients send them;
records in the body are decoded and compared with what was put.
"""
import asyncio
import dataclasses

import pytest

from pybroker._fast import record as record_codec
from pybroker.broker import pull
from pybroker.broker.channel import Channel
from pybroker.broker.context import BrokerContext
from pybroker.broker.managers.client_channel import make_channel_info
from pybroker.broker.metadata import MetadataState
from pybroker.config import load_broker_config
from pybroker.errors import HeaderError
from pybroker.protocol import constants
from pybroker.protocol.bodies import build_subscription
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.headers import PULL_MESSAGE_RESPONSE
from pybroker.protocol.properties import encode_properties
from pybroker.store.config_docs import SubscriptionGroupConfig, TopicConfig
from pybroker.store.message_store import MessageStore

TOPIC = "TopicTest"
GROUP = "GroupA"
HOST = bytes([127, 0, 0, 1])
SMALL_STORE = {"mappedFileSizeCommitLog": str(8 << 20), "mappedFileSizeConsumeQueue": "20000",
               "maxHashSlotNum": "1000", "maxIndexNum": "4000", "brokerIP1": "127.0.0.1"}


def encode_record(body: bytes, tag: str | None = None, topic: str = TOPIC,
                  queue_id: int = 0) -> bytearray:
    properties = encode_properties({constants.Property.TAGS: tag}).encode()
    size = record_codec.encoded_size(len(body), len(topic), len(properties), 0)
    buffer = bytearray(size)
    record_codec.encode_into(buffer, 0, topic.encode(), queue_id, 0, body, properties, 0,
                             1_700_000_000_000, HOST, 40000, HOST, 10911)
    return buffer


class Broker:
    """A store, metadata and context on tmp_path; ``sent`` collects channel.send output."""

    def __init__(self, tmp_path, overrides=None, ctx_overrides=None, clock_ms=None):
        settings = dict(SMALL_STORE, storePathRootDir=str(tmp_path), **(overrides or {}))
        self.config = load_broker_config(None, settings)
        self.store = MessageStore(self.config.store, clock_ms=clock_ms)
        self.store.load()
        self.store.start()
        self.metadata = MetadataState(self.config)
        self.metadata.topics.update_topic_config(TopicConfig(TOPIC, read_queue_nums=4,
                                                      write_queue_nums=4))
        config = self.config
        if ctx_overrides:
            config = dataclasses.replace(
                config, **{area: dataclasses.replace(getattr(config, area), **values)
                           for area, values in ctx_overrides.items()})
        self.ctx = BrokerContext(config, self.store, None, self.metadata, (HOST, 10911))
        self.sent: list[RemotingCommand] = []
        self.channel = Channel("0:1", "127.0.0.1:40000", int(constants.LanguageCode.JAVA), 401,
                               self.sent.append)

    def put(self, body: bytes, tag: str | None = None, queue_id: int = 0) -> int:
        result = self.store.put_messages(encode_record(body, tag, queue_id=queue_id), TOPIC,
                                         queue_id, 1, 0)
        assert result.status.stored
        return result.queue_offset

    def register(self, expression: str = "*", sub_version: int = 1_700_000_000_000) -> None:
        subscription = build_subscription(TOPIC, expression, "TAG", sub_version)
        self.metadata.consumers.register_consumer(
            GROUP, make_channel_info(self.channel, "127.0.0.1@1", 0),
            constants.ConsumeType.CONSUME_PASSIVELY, constants.MessageModel.CLUSTERING,
            constants.ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, [subscription])
        self.sent.clear()   # the membership notification

    def pull(self, request: RemotingCommand):
        return asyncio.run(pull.handle_pull_message(self.ctx, self.channel, request))

    def close(self) -> None:
        self.store.shutdown()


@pytest.fixture
def broker(tmp_path):
    created = Broker(tmp_path)
    yield created
    created.close()


def java_pull(queue_offset: int, *, queue_id: int = 0, sys_flag: int = 0x3,
              sub_version: int = 1_700_000_000_000, commit_offset: int = 0,
              max_msg_nums: int = 32, code: int = RequestCode.PULL_MESSAGE,
              **extra: str) -> RemotingCommand:
    """A pull as the Java push consumer sends it (no subscription, expressionType TAG)."""
    ext_fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id),
                  "queueOffset": str(queue_offset), "maxMsgNums": str(max_msg_nums),
                  "sysFlag": str(sys_flag), "commitOffset": str(commit_offset),
                  "suspendTimeoutMillis": "15000", "subVersion": str(sub_version),
                  "expressionType": "TAG", "bname": "broker-a"}
    ext_fields.update(extra)
    return RemotingCommand(code, opaque=7, ext_fields=ext_fields)


def go_pull(queue_offset: int, sys_flag: int = 0x2) -> RemotingCommand:
    """A pull as the Go push consumer sends it: subVersion 0, empty subscription value."""
    return java_pull(queue_offset, sys_flag=sys_flag, sub_version=0, subscription="",
                     suspendTimeoutMillis="20000")


def lite_pull(queue_offset: int, expression: str, sys_flag: int = 0x14) -> RemotingCommand:
    return java_pull(queue_offset, sys_flag=sys_flag, code=RequestCode.LITE_PULL_MESSAGE,
                     subscription=expression)


def header_longs(response: RemotingCommand) -> dict[str, int]:
    """The four always-present longs, parsed as the Java client does (all required)."""
    header = PULL_MESSAGE_RESPONSE.parse(response.ext_fields)
    return {"suggest": header.suggest_which_broker_id, "next": header.next_begin_offset,
            "min": header.min_offset, "max": header.max_offset}


def bodies_of(body) -> list[bytes]:
    """Decode the concatenated records of a pull body; each must be a whole valid record.
    A found pull's body is a MappedBody (views of the CommitLog): bytes() joins them."""
    body = bytes(body)
    bodies, position = [], 0
    while position < len(body):
        status, total_size = record_codec.check(body, position, len(body), True)
        assert status == record_codec.RECORD_OK
        bodies.append(bytes(record_codec.decode(body, position).body))
        position += total_size
    return bodies


# --- found, clients, filtering ------------------------------------------------------------------
def test_java_push_pull_returns_raw_records_and_commits_offset(broker):
    for number in range(5):
        broker.put(b"message-%d" % number)
    broker.register()
    response = broker.pull(java_pull(1, commit_offset=1))
    assert response.code == ResponseCode.SUCCESS
    assert response.opaque == 7 and response.is_response
    assert response.remark == "FOUND"
    assert header_longs(response) == {"suggest": 0, "next": 5, "min": 0, "max": 5}
    assert bodies_of(response.body) == [b"message-%d" % n for n in range(1, 5)]
    assert broker.metadata.offsets.query(GROUP, TOPIC, 0) == 1


def test_body_is_byte_identical_to_the_stored_records(broker):
    offsets = [broker.put(b"x" * size) for size in (1, 100, 1000)]
    broker.register()
    response = broker.pull(java_pull(0))
    selected = [broker.store.look_message_by_offset(phy) for phy in
                (0, len(encode_record(b"x")), len(encode_record(b"x")) +
                 len(encode_record(b"x" * 100)))]
    expected = b"".join(bytes(item.buffer) for item in selected)
    for item in selected:
        item.release()
    assert offsets == [0, 1, 2]
    assert bytes(response.body) == expected


def test_go_pull_with_subversion_zero_and_empty_subscription(broker):
    broker.put(b"go")
    broker.register(sub_version=1_700_000_000_000_000_000)   # Go heartbeats in nanoseconds
    response = broker.pull(go_pull(0))
    assert response.code == ResponseCode.SUCCESS
    assert bodies_of(response.body) == [b"go"]
    assert broker.metadata.offsets.query(GROUP, TOPIC, 0) == -1   # flag 0x2: no commit


@pytest.mark.parametrize("sys_flag", [0x14, 0x16])
def test_lite_pull_filters_by_request_subscription(broker, sys_flag):
    for number, tag in enumerate(["TagA", "TagB", None, "TagA", "TagC"]):
        broker.put(b"m%d" % number, tag)
    response = broker.pull(lite_pull(0, "TagA || TagC", sys_flag))
    assert response.code == ResponseCode.SUCCESS
    assert bodies_of(response.body) == [b"m0", b"m3", b"m4"]
    assert header_longs(response)["next"] == 5


def test_registered_tag_subscription_filters(broker):
    for number, tag in enumerate(["TagA", "TagB", "TagB"]):
        broker.put(b"m%d" % number, tag)
    broker.register("TagB")
    response = broker.pull(java_pull(0))
    assert bodies_of(response.body) == [b"m1", b"m2"]


def test_all_scanned_entries_filtered_is_retry_immediately(broker):
    for number in range(3):
        broker.put(b"m%d" % number, "TagA")
    response = broker.pull(lite_pull(0, "TagZ"))
    assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert response.body is None
    assert header_longs(response) == {"suggest": 0, "next": 3, "min": 0, "max": 3}


def test_max_msg_nums_bounds_the_batch(broker):
    for number in range(10):
        broker.put(b"m%d" % number)
    response = broker.pull(java_pull(2, max_msg_nums=3, sys_flag=0x4, subscription="*"))
    assert bodies_of(response.body) == [b"m2", b"m3", b"m4"]
    assert header_longs(response)["next"] == 5


# --- the protocol.md §2.3 status rows -------------------------------------------------------------
@pytest.mark.parametrize("queue_id, queue_offset, code, longs", [
    # queue empty / unknown: "not found" at 0, "moved" elsewhere, next corrected to 0
    (1, 0, ResponseCode.PULL_NOT_FOUND, {"next": 0, "min": 0, "max": 0}),
    (1, 5, ResponseCode.PULL_OFFSET_MOVED, {"next": 0, "min": 0, "max": 0}),
    # offset < min: moved to min
    (0, -1, ResponseCode.PULL_OFFSET_MOVED, {"next": 0, "min": 0, "max": 3}),
    # offset == max: not found, stays
    (0, 3, ResponseCode.PULL_NOT_FOUND, {"next": 3, "min": 0, "max": 3}),
    # offset > max: moved to max (protocol.md §2.3, Java 5.x)
    (0, 9, ResponseCode.PULL_OFFSET_MOVED, {"next": 3, "min": 0, "max": 3}),
])
def test_status_rows(broker, queue_id, queue_offset, code, longs):
    for number in range(3):
        broker.put(b"m%d" % number)
    broker.register()
    response = broker.pull(java_pull(queue_offset, queue_id=queue_id, sys_flag=0x1))
    assert response.code == code
    assert response.body is None
    assert header_longs(response) == dict(longs, suggest=0)


def test_not_found_with_suspend_flag_but_no_long_poll_service_answers_at_once(broker):
    broker.register()
    response = broker.pull(java_pull(0, sys_flag=0x3))
    assert response.code == ResponseCode.PULL_NOT_FOUND


# --- pre-checks, in Java's order ----------------------------------------------------------------
def refusal(response: RemotingCommand, code: int, remark_start: str) -> None:
    assert response.code == code
    assert response.remark.startswith(remark_start), response.remark
    assert response.ext_fields == {}
    assert response.body is None


def test_broker_not_readable(tmp_path):
    broker = Broker(tmp_path, {"brokerPermission": "2"})
    try:
        refusal(broker.pull(java_pull(0)), ResponseCode.NO_PERMISSION,
                "the broker[127.0.0.1] pulling message is forbidden")
    finally:
        broker.close()


def test_group_not_exist_without_auto_create(tmp_path):
    broker = Broker(tmp_path, {"autoCreateSubscriptionGroup": "false"})
    try:
        refusal(broker.pull(java_pull(0)), ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{GROUP}] does not exist, \nSee ")
    finally:
        broker.close()


def test_group_auto_created_on_pull(broker):
    broker.pull(lite_pull(0, "*"))
    assert broker.metadata.groups.subscription_groups()[GROUP].group_name == GROUP


def test_group_consume_disabled(broker):
    broker.metadata.groups.update_subscription_group(SubscriptionGroupConfig(GROUP,
                                                                      consume_enable=False))
    refusal(broker.pull(java_pull(0)), ResponseCode.NO_PERMISSION,
            f"subscription group no permission, {GROUP}")


def test_topic_not_exist(broker):
    request = java_pull(0)
    request.ext_fields["topic"] = "NoSuchTopic"
    refusal(broker.pull(request), ResponseCode.TOPIC_NOT_EXIST,
            "topic[NoSuchTopic] not exist, apply first please! \nSee ")


def test_topic_not_readable(broker):
    broker.metadata.topics.update_topic_config(TopicConfig(TOPIC, 4, 4, perm=2))
    refusal(broker.pull(java_pull(0)), ResponseCode.NO_PERMISSION,
            f"the topic[{TOPIC}] pulling message is forbidden")


@pytest.mark.parametrize("queue_id", [4, -1])
def test_queue_id_outside_read_queues(broker, queue_id):
    refusal(broker.pull(java_pull(0, queue_id=queue_id)), ResponseCode.SYSTEM_ERROR,
            f"queueId[{queue_id}] is illegal, topic:[{TOPIC}] topicConfig.readQueueNums:[4] "
            "consumer:[/127.0.0.1:40000]")


def test_no_registered_subscription(broker):
    refusal(broker.pull(java_pull(0)), ResponseCode.SUBSCRIPTION_NOT_EXIST,
            "the consumer's subscription not exist\nSee ")


def test_registered_subscription_older_than_request(broker):
    broker.register(sub_version=100)
    refusal(broker.pull(java_pull(0, sub_version=101)), ResponseCode.SUBSCRIPTION_NOT_LATEST,
            "the consumer's subscription not latest")


def test_empty_sql92_expression_fails_to_parse(broker):
    request = java_pull(0, sys_flag=0x4, subscription="", expressionType="SQL92")
    refusal(broker.pull(request), ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            "parse the consumer's subscription failed")


@pytest.mark.parametrize("expression", ["a > 1", "a >"])
def test_sql92_refused_like_java_without_property_filter(tmp_path, expression):
    # SQL92 with enablePropertyFilter=true: tests/unit/broker/test_pull_sql92.py.
    broker = Broker(tmp_path, {"enablePropertyFilter": "false"})
    try:
        request = java_pull(0, sys_flag=0x4, subscription=expression, expressionType="SQL92")
        refusal(broker.pull(request), ResponseCode.SYSTEM_ERROR,
                "The broker does not support consumer to filter message by SQL92")
    finally:
        broker.close()


def test_header_missing_required_field_raises_header_error(broker):
    request = java_pull(0)
    del request.ext_fields["queueOffset"]
    with pytest.raises(HeaderError, match="queueOffset"):
        broker.pull(request)


# --- offset piggy-back, roles, suggestWhichBrokerId ---------------------------------------------
def test_commit_offset_only_with_flag_bit_0(broker):
    broker.put(b"m")
    broker.register()
    broker.pull(java_pull(0, sys_flag=0x2, commit_offset=1))
    assert broker.metadata.offsets.query(GROUP, TOPIC, 0) == -1
    broker.pull(java_pull(0, sys_flag=0x1, commit_offset=1))
    assert broker.metadata.offsets.query(GROUP, TOPIC, 0) == 1


def test_commit_offset_even_when_nothing_found(broker):
    broker.register()
    response = broker.pull(java_pull(0, sys_flag=0x1, commit_offset=0))
    assert response.code == ResponseCode.PULL_NOT_FOUND
    assert broker.metadata.offsets.query(GROUP, TOPIC, 0) == 0


def test_slave_serves_messages_suggests_master_and_keeps_no_offset(tmp_path):
    # Java 4.9.x: the status mapping overwrites the slave's PULL_RETRY_IMMEDIATELY.
    broker = Broker(tmp_path, ctx_overrides={"store": {"broker_role": "SLAVE"}})
    try:
        broker.put(b"m")
        broker.register()
        response = broker.pull(java_pull(0, sys_flag=0x1, commit_offset=1))
        assert response.code == ResponseCode.SUCCESS
        assert header_longs(response)["suggest"] == 0
        assert broker.metadata.offsets.query(GROUP, TOPIC, 0) == -1
    finally:
        broker.close()


def test_slave_does_not_move_offsets_it_answers_retry_with_group_broker_id(tmp_path):
    broker = Broker(tmp_path, ctx_overrides={"store": {"broker_role": "SLAVE"}})
    try:
        broker.metadata.groups.update_subscription_group(
            SubscriptionGroupConfig(GROUP, broker_id=2))
        broker.put(b"m")
        broker.register()
        response = broker.pull(java_pull(7, sys_flag=0x1))
        assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert header_longs(response) == {"suggest": 2, "next": 1, "min": 0, "max": 1}
    finally:
        broker.close()


def test_slave_read_enable_suggests_the_group_broker_id(tmp_path):
    broker = Broker(tmp_path, {"slaveReadEnable": "true"})
    try:
        broker.metadata.groups.update_subscription_group(
            SubscriptionGroupConfig(GROUP, broker_id=3))
        broker.put(b"m")
        broker.register()
        response = broker.pull(java_pull(0))
        assert response.code == ResponseCode.SUCCESS
        assert header_longs(response)["suggest"] == 3
    finally:
        broker.close()


def test_handlers_table():
    assert pull.HANDLERS == {RequestCode.PULL_MESSAGE: pull.handle_pull_message,
                             RequestCode.LITE_PULL_MESSAGE: pull.handle_pull_message}


def test_commit_log_data_being_deleted_is_retry_immediately(tmp_path):
    # Small CommitLog files: queue 0's records all sit in files that go while its
    # consume-queue units stay; the last file holds queue 1 only.
    broker = Broker(tmp_path, {"maxMessageSize": "1024", "mappedFileSizeCommitLog": "65536"})
    try:
        for number in range(10):
            broker.put(b"m%04d" % number + b"x" * 900)
        files = broker.store.commitlog.mapped_file_queue
        files_before = len(files.mapped_files)
        while len(files.mapped_files) == files_before:
            broker.put(b"other" + b"y" * 900, queue_id=1)
        assert files.delete_expired_by_time(0, 0, 0, clean_immediately=True) == files_before
        broker.register()
        response = broker.pull(java_pull(0, sys_flag=0x0))
        assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert response.remark == "MESSAGE_WAS_REMOVING"
        assert response.body is None
        assert header_longs(response) == {"suggest": 0, "next": 10, "min": 0, "max": 10}
    finally:
        broker.close()


# --- LITE_PULL_MESSAGE (361) as Java 5.3.3 answers it ---------------------------------------------
def test_lite_pull_refused_when_disabled(tmp_path):
    broker = Broker(tmp_path, {"litePullMessageEnable": "false"})
    try:
        response = broker.pull(lite_pull(0, "*"))
        assert (response.code, response.remark) == (
            ResponseCode.NO_PERMISSION,
            "the broker[127.0.0.1] for lite pull consumer is forbidden")
        assert response.ext_fields == {"forbiddenType": "1"}
        assert broker.pull(java_pull(0, sys_flag=0x4, subscription="*")).code == \
            ResponseCode.PULL_NOT_FOUND     # code 11 is not affected
    finally:
        broker.close()


def test_lite_pull_refusals_name_what_forbids_them(broker):
    broker.metadata.groups.update_subscription_group(SubscriptionGroupConfig(
        GROUP, consume_enable=False))
    assert broker.pull(lite_pull(0, "*")).ext_fields == {"forbiddenType": "2"}
    broker.metadata.groups.update_subscription_group(SubscriptionGroupConfig(GROUP))
    broker.metadata.topics.update_topic_config(TopicConfig(TOPIC, 4, 4, perm=2))
    response = broker.pull(lite_pull(0, "*"))
    assert (response.code, response.ext_fields) == (ResponseCode.NO_PERMISSION,
                                                     {"forbiddenType": "3"})
    refusal(broker.pull(java_pull(0)), ResponseCode.NO_PERMISSION,
            f"the topic[{TOPIC}] pulling message is forbidden")   # 4.9: no forbiddenType


def test_lite_pull_queue_id_out_of_range_is_invalid_parameter(broker):
    request = java_pull(0, queue_id=4, sys_flag=0x14, code=RequestCode.LITE_PULL_MESSAGE,
                        subscription="*")
    refusal(broker.pull(request), ResponseCode.INVALID_PARAMETER,
            f"queueId[4] is illegal, topic:[{TOPIC}] ")


def test_lite_pull_answers_carry_topic_and_group_sys_flags(broker):
    broker.metadata.topics.update_topic_config(TopicConfig(TOPIC, 4, 4, topic_sys_flag=1))
    broker.put(b"m0")
    found = broker.pull(lite_pull(0, "*"))
    assert found.code == ResponseCode.SUCCESS
    assert (found.ext_fields["topicSysFlag"], found.ext_fields["groupSysFlag"]) == ("1", "0")
    empty = broker.pull(lite_pull(1, "*"))
    assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.ext_fields["topicSysFlag"] == "1"
    plain = broker.pull(java_pull(0, sys_flag=0x4, subscription="*"))
    assert "topicSysFlag" not in plain.ext_fields and "groupSysFlag" not in plain.ext_fields
