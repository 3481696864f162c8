"""Admin handlers change topics and groups and report stats in the shapes mqadmin parses.

Method: handlers called directly with built requests against a real MetadataState and a real
MessageStore in tmp_path (messages put through the store); fastjson-shaped bodies are checked
byte-for-byte where small and otherwise read back with pybroker.protocol.fastjson; client
calls (307/309) go to a Channel whose send records the forwarded request, answered through
MetadataState.complete_client_call.
"""
import asyncio
import dataclasses

import orjson
import pytest

from pybroker._fast import record as record_codec
from pybroker._fast.stats import StatsCounter
from pybroker.broker.admin import HANDLERS
from pybroker.broker.admin.offsets import encode_consume_stats
from pybroker.broker.admin.topics import encode_topic_stats_table
from pybroker.broker.channel import Channel
from pybroker.broker.context import MetadataContext, StoreTopicDeleter
from pybroker.broker.managers.client_channel import make_channel_info
from pybroker.broker.metadata import MetadataState
from pybroker.config import load_broker_config, parse_properties
from pybroker.errors import HeaderError
from pybroker.protocol import bodies, fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request, create_response
from pybroker.protocol.constants import ConsumeFromWhere, ConsumeType, MessageModel
from pybroker.stats.region import StatsRegion
from pybroker.stats.service import StatsService
from pybroker.store import config_docs, paths
from pybroker.store.config_docs import DelayOffsetDocument, TopicConfig
from pybroker.store.control_block import APPENDER, ControlBlock, stats_section_count
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig

HOST = bytes([127, 0, 0, 1])
BROKER = "broker-a"
C = RequestCode


@pytest.fixture
def broker(tmp_path):
    value = Broker(tmp_path)
    yield value
    value.store.shutdown()


class Broker:
    def __init__(self, tmp_path, **overrides):
        values = {"brokerName": BROKER, "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1",
                  "storePathRootDir": str(tmp_path), "namesrvAddr": "127.0.0.1:9876"}
        values.update(overrides)
        config = load_broker_config(overrides=values)
        self.put_results = []
        self.store = MessageStore(StoreConfig(
            store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=64 * 1024,
            mapped_file_size_consume_queue=64 * 20, max_hash_slot_num=64, max_index_num=512),
            clock_ms=lambda: 1_700_000_000_000 + len(self.put_results))
        self.store.start()
        self.delay_offsets: DelayOffsetDocument | None = None     # no delay service
        self.metadata = MetadataState(config, client_call_timeout_ms=200,
                                      delay_offsets=lambda: self.delay_offsets)
        self.ctx = MetadataContext(config, self.store, None, self.metadata, (HOST, 10911),
                                   topic_deleter=StoreTopicDeleter(self.store))
        self.channel = Channel("0:admin", "192.0.2.9:41000", 0, 409)

    def call(self, code, ext_fields=None, body=None):
        request = create_request(code, ext_fields, body)
        return asyncio.run(HANDLERS[code](self.ctx, self.channel, request))

    def put(self, topic: str, queue_id: int, count: int):
        for index in range(count):
            body = b"message %d" % index
            buffer = bytearray(record_codec.encoded_size(len(body), len(topic), 0, 0))
            record_codec.encode_into(buffer, 0, topic.encode(), queue_id, 0, body, b"", 0,
                                     1_700_000_000_000, HOST, 4242, HOST, 10911)
            self.put_results.append(self.store.put_messages(buffer, topic, queue_id, 1, 0))
        return self.put_results[-count:]


def create_topic(broker, topic, read=4, write=4, **extra):
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(read),
              "writeQueueNums": str(write), "perm": "6", "topicFilterType": "SINGLE_TAG",
              **extra}
    return broker.call(C.UPDATE_AND_CREATE_TOPIC, fields)


def register_consumer(broker, group, topics, channel):
    subscriptions = [bodies.build_subscription(topic, "*", sub_version=1) for topic in topics]
    broker.metadata.consumers.register_consumer(group, make_channel_info(channel, "client-1", 0),
                                      ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
                                      ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, subscriptions)


# --- topics -------------------------------------------------------------------------------------
def test_create_topic_persists_and_refuses_system_and_bad_names(broker, tmp_path):
    counter = broker.metadata.topics.data_version.counter
    assert create_topic(broker, "Orders", 2, 3, order="true").code == ResponseCode.SUCCESS
    saved = config_docs.load_topics(paths.config_path(str(tmp_path), paths.TOPICS_CONFIG))
    assert saved.topic_config_table["Orders"] == TopicConfig("Orders", 2, 3, 6, order=True)
    assert broker.metadata.topics.data_version.counter == counter + 1
    for topic in ("TBW102", BROKER, "DefaultCluster", "SCHEDULE_TOPIC_XXXX", "rmq_sys_x"):
        response = create_topic(broker, topic)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert response.remark == f"The topic[{topic}] is conflict with system topic."
    assert create_topic(broker, "bad topic").code == ResponseCode.SYSTEM_ERROR
    assert create_topic(broker, "x" * 128).code == ResponseCode.SYSTEM_ERROR
    assert create_topic(broker, "T", topicFilterType="NONE").code == \
        ResponseCode.INVALID_PARAMETER
    assert create_topic(broker, "T", read=-1).code == ResponseCode.INVALID_PARAMETER
    assert broker.metadata.topic_config("T") is None
    with pytest.raises(HeaderError):
        broker.call(C.UPDATE_AND_CREATE_TOPIC, {"topic": "T"})


def test_slave_refuses_changes(tmp_path):
    slave = Broker(tmp_path, brokerRole="SLAVE", brokerId="1")
    try:
        for response in (create_topic(slave, "T"),
                         slave.call(C.DELETE_TOPIC_IN_BROKER, {"topic": "T"}),
                         slave.call(C.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G"}),
                         slave.call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b"{}")):
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert response.remark.startswith("Can't modify topic or subscription group")
    finally:
        slave.store.shutdown()


def test_delete_topic_removes_config_queues_and_offsets(broker):
    create_topic(broker, "Gone", 2, 2)
    broker.put("Gone", 1, 3)
    broker.metadata.offsets.commit("G", "Gone", 1, 2)
    assert broker.call(C.DELETE_TOPIC_IN_BROKER, {"topic": "Gone"}).code == ResponseCode.SUCCESS
    assert broker.metadata.topic_config("Gone") is None
    assert broker.store.get_max_offset_in_queue("Gone", 1) == 0
    assert broker.metadata.offsets.query("G", "Gone", 1) == -1
    refused = broker.call(C.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"})
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert broker.metadata.topic_config("TBW102") is not None


class _SilentDataPlane:
    """A TopicDeleter whose data plane never answers (the supervisor's gives up after 10 s)."""

    def __init__(self):
        self.asked = []

    async def delete_topics(self, topics) -> bool:
        self.asked.append(list(topics))
        return False


def test_delete_topic_not_done_by_the_data_plane_is_not_success(broker):
    create_topic(broker, "Slow", 1, 1)
    broker.ctx.topic_deleter = _SilentDataPlane()
    response = broker.call(C.DELETE_TOPIC_IN_BROKER, {"topic": "Slow"})
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "did not delete its consume queues in time" in response.remark
    assert broker.ctx.topic_deleter.asked == [["Slow"]]
    assert broker.metadata.topic_config("Slow") is None     # the config went, as in Java


def test_all_topic_config_is_the_compact_topics_document(broker):
    create_topic(broker, "Orders", 2, 2)
    response = broker.call(C.GET_ALL_TOPIC_CONFIG)
    document = config_docs.TopicConfigDocument.from_json(orjson.loads(response.body))
    assert document.topic_config_table == broker.metadata.topic_configs()
    assert document.data_version == broker.metadata.topics.data_version
    assert b" " not in response.body and b"\n" not in response.body


def test_topic_stats_table_shape_and_values(broker):
    assert encode_topic_stats_table([(bodies.MessageQueue("T", "b", 0), {
        "minOffset": 1, "maxOffset": 5, "lastUpdateTimestamp": 9})]) == \
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:' \
        b'{"lastUpdateTimestamp":9,"maxOffset":5,"minOffset":1}}}'
    create_topic(broker, "Stats", 2, 2)
    results = broker.put("Stats", 1, 3)
    response = broker.call(C.GET_TOPIC_STATS_INFO, {"topic": "Stats"})
    table = fastjson.loads(response.body)["offsetTable"]
    by_queue = {orjson.loads(key)["queueId"]: value for key, value in table.items()}
    assert {orjson.loads(key)["brokerName"] for key in table} == {BROKER}
    assert by_queue[0] == {"lastUpdateTimestamp": 0, "maxOffset": 0, "minOffset": 0}
    assert by_queue[1] == {"lastUpdateTimestamp": results[-1].store_timestamp, "maxOffset": 3,
                           "minOffset": 0}
    missing = broker.call(C.GET_TOPIC_STATS_INFO, {"topic": "Nope"})
    assert (missing.code, missing.remark) == (ResponseCode.TOPIC_NOT_EXIST,
                                              "topic[Nope] not exist")


# --- consumers ----------------------------------------------------------------------------------
def test_consume_stats_per_queue(broker):
    assert encode_consume_stats([], 0.0) == b'{"consumeTps":0.0,"offsetTable":{}}'
    create_topic(broker, "Work", 2, 2)
    results = broker.put("Work", 0, 4)
    broker.metadata.offsets.commit("G", "Work", 0, 3)
    broker.metadata.offsets.commit("G", "Other", 0, 1)   # no topic config: skipped
    response = broker.call(C.GET_CONSUME_STATS, {"consumerGroup": "G"})
    stats = fastjson.loads(response.body)
    assert stats["consumeTps"] == 0.0
    by_queue = {orjson.loads(k)["queueId"]: v for k, v in stats["offsetTable"].items()}
    assert by_queue == {
        0: {"brokerOffset": 4, "consumerOffset": 3, "pullOffset": 3,
            "lastTimestamp": results[2].store_timestamp},
        1: {"brokerOffset": 0, "consumerOffset": 0, "pullOffset": 0, "lastTimestamp": 0}}
    # A live group subscribed elsewhere reports nothing for this topic.
    register_consumer(broker, "G", ["Elsewhere"], Channel("0:c", "1.2.3.4:5", 0, 409))
    response = broker.call(C.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "Work"})
    assert fastjson.loads(response.body)["offsetTable"] == {}


def test_consumer_connection_list(broker):
    channel = Channel("0:c", "10.1.1.1:5000", 9, 317)
    register_consumer(broker, "G", ["T"], channel)
    response = broker.call(C.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G"})
    connection = orjson.loads(response.body)
    assert connection["connectionSet"] == [{"clientAddr": "10.1.1.1:5000",
                                            "clientId": "client-1", "language": "GO",
                                            "version": 317}]
    assert (connection["consumeType"], connection["messageModel"],
            connection["consumeFromWhere"]) == ("CONSUME_PASSIVELY", "CLUSTERING",
                                                "CONSUME_FROM_FIRST_OFFSET")
    assert connection["subscriptionTable"]["T"]["subString"] == "*"
    missing = broker.call(C.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "None"})
    assert missing.code == ResponseCode.CONSUMER_NOT_ONLINE


def test_topic_consume_by_who_lists_live_and_offset_groups(broker):
    broker.metadata.offsets.commit("Committed", "Work", 0, 3)
    broker.metadata.offsets.commit("OtherTopic", "Elsewhere", 0, 1)
    register_consumer(broker, "Live", ["Work"], Channel("0:c", "1.2.3.4:5", 0, 409))
    response = broker.call(C.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "Work"})
    assert response.code == ResponseCode.SUCCESS
    assert orjson.loads(response.body) == {"groupList": ["Committed", "Live"]}
    nobody = broker.call(C.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "Nobody"})
    assert orjson.loads(nobody.body) == {"groupList": []}
    with pytest.raises(HeaderError):
        broker.call(C.QUERY_TOPIC_CONSUME_BY_WHO, {})


# --- broker -------------------------------------------------------------------------------------
def test_runtime_info_and_broker_config(broker, tmp_path):
    """The runtime table comes from the supervisor's statistics: a real region the appender's
    section counts puts in, and a real control block for the positions."""
    broker.put("Info", 0, 2)
    region = StatsRegion.create(str(tmp_path / "stats"), stats_section_count(1), 1234)
    control = ControlBlock(str(tmp_path / "control"), create=True)
    appender = region.writer(APPENDER.stats_section)
    appender.add(StatsCounter.PUT_MESSAGES, 2)
    control.publish("written_position", broker.store.max_physical_offset)
    broker.ctx = dataclasses.replace(
        broker.ctx, stats_service=StatsService(region, "DefaultCluster", control=lambda: control))
    table = bodies.decode_kv_table(broker.call(C.GET_BROKER_RUNTIME_INFO).body)
    for key in ("brokerVersionDesc", "brokerVersion", "msgPutTotalYesterdayMorning",
                "msgPutTotalTodayMorning", "msgPutTotalTodayNow", "msgGetTotalTodayNow",
                "sendThreadPoolQueueSize", "sendThreadPoolQueueCapacity",
                "pullThreadPoolQueueCapacity", "queryThreadPoolQueueSize",
                "EndTransactionQueueSize", "EndTransactionThreadPoolQueueCapacity",
                "ackThreadPoolQueueSize", "ackThreadPoolQueueCapacity",
                "ackThreadPoolQueueHeadWaitTimeMills", "dispatchBehindBytes",
                "pageCacheLockTimeMills", "earliestMessageTimeStamp",
                "startAcceptSendRequestTimeStamp", "commitLogDirCapacity"):
        assert key in table, key
    assert (table["brokerVersion"], table["msgPutTotalTodayNow"]) == ("409", "2")
    assert table["commitLogMaxOffset"] == str(broker.store.max_physical_offset)
    # mqadmin clusterList splits these without a null check: three rates each (Java's empty
    # field while a window has no samples yet).
    for key in ("putTps", "getFoundTps", "getMissTps", "getTotalTps", "getTransferedTps"):
        assert len(table[key].split(" ")) == 3, key
    appender.close()
    control.close()
    region.close()
    response = broker.call(C.GET_BROKER_CONFIG)
    settings = parse_properties(bytes(response.body).decode())
    assert (settings["brokerName"], settings["listenPort"]) == (BROKER, "10911")
    assert settings["autoCreateTopicEnable"] == "true"
    version = orjson.loads(response.ext_fields["version"])
    # The configuration's own version (Java Configuration.dataVersion), not the topics'.
    assert version == {"counter": 0, "timestamp": broker.metadata.config_version.timestamp}
    create_topic(broker, "AfterStart")
    assert orjson.loads(broker.call(C.GET_BROKER_CONFIG).ext_fields["version"]) == version
    # Ext values must be str to go on the wire (bytes made every real GET_BROKER_CONFIG fail).
    assert isinstance(response.ext_fields["version"], str)


# --- groups and offsets ---------------------------------------------------------------------
def test_subscription_group_admin(broker, tmp_path):
    body = b'{"groupName":"Slow","consumeEnable":false,"retryMaxTimes":3,"unknownField":1}'
    assert broker.call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body).code == \
        ResponseCode.SUCCESS
    saved = config_docs.load_subscription_groups(
        paths.config_path(str(tmp_path), paths.SUBSCRIPTION_GROUP_CONFIG))
    slow = saved.subscription_group_table["Slow"]
    assert (slow.consume_enable, slow.retry_max_times, slow.extra) == \
        (False, 3, {"unknownField": 1})
    listed = orjson.loads(broker.call(C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)
    assert listed["subscriptionGroupTable"]["Slow"]["retryMaxTimes"] == 3
    for bad in (None, b"[", b"[]", b'{"groupName":"bad name"}'):
        response = broker.call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=bad)
        assert response.code == ResponseCode.SYSTEM_ERROR and response.remark
    broker.metadata.offsets.commit("Slow", "T", 0, 5)
    broker.call(C.DELETE_SUBSCRIPTIONGROUP, {"groupName": "Slow"})
    assert not broker.metadata.groups.has_subscription_group("Slow")
    assert broker.metadata.offsets.query("Slow", "T", 0) == 5          # offsets kept by default
    broker.call(C.DELETE_SUBSCRIPTIONGROUP, {"groupName": "Slow", "removeOffset": "true"})
    assert broker.metadata.offsets.query("Slow", "T", 0) == -1


def test_all_consumer_and_delay_offsets(broker, tmp_path):
    broker.metadata.offsets.commit("G", "T", 1, 7)
    offsets = config_docs.ConsumerOffsetDocument.from_json(
        fastjson.loads(broker.call(C.GET_ALL_CONSUMER_OFFSET).body))
    assert offsets.offset_table == {"T@G": {1: 7}}
    assert orjson.loads(broker.call(C.GET_ALL_DELAY_OFFSET).body) == {"offsetTable": {}}
    config_docs.save_delay_offsets(paths.config_path(str(tmp_path), paths.DELAY_OFFSET_CONFIG),
                                   DelayOffsetDocument({1: 4, 3: 9}))
    body = broker.call(C.GET_ALL_DELAY_OFFSET).body
    assert config_docs.DelayOffsetDocument.from_json(orjson.loads(body)).offset_table == \
        {1: 4, 3: 9}
    broker.delay_offsets = DelayOffsetDocument({2: 1})
    assert orjson.loads(broker.call(C.GET_ALL_DELAY_OFFSET).body) == {"offsetTable": {"2": 1}}


# --- broker -> client calls ---------------------------------------------------------------------
def answer_later(broker, sent, code=0, body=b'{"jstack":""}'):
    """Answer the first forwarded request as the client would, once it was sent."""
    async def answer():
        while not sent:
            await asyncio.sleep(0)
        reply = create_response(sent[0], code, "from client", {"k": "v"}, body)
        assert broker.metadata.client_calls.complete_client_call("0:client", reply)
    return answer()


def run_with_answer(broker, sent, code, fields, body=None):
    async def scenario():
        request = create_request(code, fields, body)
        answered = asyncio.ensure_future(answer_later(broker, sent))
        response = await HANDLERS[code](broker.ctx, broker.channel, request)
        await answered
        return request, response
    return asyncio.run(scenario())


def test_consumer_running_info_is_forwarded_and_answered(broker):
    sent = []
    register_consumer(broker, "G", ["T"], Channel("0:client", "1.2.3.4:5", 0, 409,
                                                  sent.append))
    sent.clear()   # the join notification
    fields = {"consumerGroup": "G", "clientId": "client-1", "jstackEnable": "false"}
    request, response = run_with_answer(broker, sent, C.GET_CONSUMER_RUNNING_INFO, fields)
    forwarded, = sent
    assert (forwarded.code, forwarded.ext_fields) == (C.GET_CONSUMER_RUNNING_INFO, fields)
    assert forwarded.opaque != request.opaque
    assert (response.opaque, response.code, response.remark, bytes(response.body)) == \
        (request.opaque, 0, "from client", b'{"jstack":""}')
    assert response.is_response
    offline = broker.call(C.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G",
                                                        "clientId": "nobody"})
    assert (offline.code, offline.remark) == (ResponseCode.SYSTEM_ERROR,
                                              "The Consumer <G> <nobody> not online")


def test_client_call_timeout_and_old_clients(broker):
    sent = []
    register_consumer(broker, "G", ["T"], Channel("0:client", "1.2.3.4:5", 0, 409,
                                                  sent.append))
    sent.clear()   # the join notification
    response = broker.call(C.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G",
                                                         "clientId": "client-1"})
    assert response.code == ResponseCode.CONSUME_MSG_TIMEOUT and len(sent) == 1
    register_consumer(broker, "Old", ["T"], Channel("0:old", "1.2.3.4:6", 0, 61, sent.append))
    sent.clear()
    response = broker.call(C.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "Old",
                                                         "clientId": "client-1"})
    assert response.code == ResponseCode.SYSTEM_ERROR and "too low" in response.remark
    assert sent == []


def test_consume_message_directly_sends_the_stored_record(broker):
    sent = []
    register_consumer(broker, "G", ["T"], Channel("0:client", "1.2.3.4:5", 0, 409,
                                                  sent.append))
    sent.clear()   # the join notification
    result, = broker.put("T", 0, 1)
    fields = {"consumerGroup": "G", "clientId": "client-1", "msgId": result.message_id}
    _, response = run_with_answer(broker, sent, C.CONSUME_MESSAGE_DIRECTLY, fields)
    forwarded, = sent
    assert forwarded.ext_fields["brokerName"] == BROKER
    decoded = record_codec.decode(forwarded.body, 0)
    assert (bytes(decoded.body), decoded.physical_offset) == (b"message 0",
                                                              result.physical_offset)
    assert response.code == ResponseCode.SUCCESS


# --- offset reset (222) and consumer status (223 -> 221) -----------------------------------------
T0 = 1_700_000_000_000   # the store clock of Broker: T0 + number of messages put before


def reset_fields(timestamp, force=False, **extra):
    return {"topic": "T", "group": "G", "timestamp": str(timestamp),
            "isForce": "true" if force else "false", **extra}


def offset_table(body) -> dict[int, int]:
    document = fastjson.loads(body)
    table = {}
    for key, offset in document["offsetTable"].items():
        queue = bodies.message_queue_from_json(orjson.loads(key), "key")
        assert (queue.topic, queue.broker_name) == ("T", BROKER)
        table[queue.queue_id] = offset
    return table


@pytest.fixture
def reset_broker(broker):
    """Topic T with 10 messages in queue 0 (store times T0..T0+9) and 4 in queue 1
    (T0+10..T0+13); group G committed the ends and has one live member recording sends."""
    create_topic(broker, "T", 2, 2)
    broker.put("T", 0, 10)
    broker.put("T", 1, 4)
    broker.metadata.offsets.commit("G", "T", 0, 10)
    broker.metadata.offsets.commit("G", "T", 1, 4)
    broker.sent = []
    register_consumer(broker, "G", ["T"], Channel("0:client", "1.2.3.4:5", 0, 409,
                                                  broker.sent.append))
    broker.sent.clear()   # the join notification
    return broker


def test_reset_offset_by_time_commits_and_notifies_the_clients(reset_broker):
    broker = reset_broker
    response = broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET, reset_fields(T0 + 5))
    assert response.code == ResponseCode.SUCCESS
    assert offset_table(response.body) == {0: 5, 1: 0}
    assert broker.metadata.offsets.consumer_offsets("G", "T") == {0: 5, 1: 0}
    notice, = broker.sent
    assert notice.code == C.RESET_CONSUMER_CLIENT_OFFSET and notice.is_oneway
    assert (notice.ext_fields["topic"], notice.ext_fields["group"],
            notice.ext_fields["timestamp"]) == ("T", "G", str(T0 + 5))
    assert offset_table(notice.body) == {0: 5, 1: 0}
    # Without isForce a queue only moves backwards; with it, also forwards.
    response = broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET, reset_fields(T0 + 8))
    assert offset_table(response.body) == {0: 5, 1: 0}
    response = broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET, reset_fields(T0 + 8, force=True))
    assert offset_table(response.body) == {0: 8, 1: 0}
    response = broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET, reset_fields(-1, force=True))
    assert broker.metadata.offsets.consumer_offsets("G", "T") == {0: 10, 1: 4}
    assert len(broker.sent) == 4


def test_reset_offset_of_one_queue_to_an_offset(reset_broker):
    broker = reset_broker
    response = broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET,
                           reset_fields(0, queueId="1", offset="2"))
    assert offset_table(response.body) == {1: 2}
    assert broker.metadata.offsets.consumer_offsets("G", "T") == {0: 10, 1: 2}
    response = broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET,
                           reset_fields(0, queueId="1", offset="5"))
    assert (response.code, response.remark) == (
        ResponseCode.SYSTEM_ERROR, "Target offset 5 not in consume queue range [0-4]")
    assert broker.metadata.offsets.consumer_offsets("G", "T") == {0: 10, 1: 2}


def test_reset_offset_refusals(reset_broker):
    broker = reset_broker
    response = broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET,
                           {**reset_fields(T0), "topic": "Nope"})
    assert response.code == ResponseCode.SYSTEM_ERROR and "no topic" in response.remark
    response = broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET, {**reset_fields(T0), "group": "H"})
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR,
                                                "THe consumer group <H> not exist")
    with pytest.raises(HeaderError):
        broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "T", "group": "G"})
    broker.metadata.consumers.unregister_consumer("G", "0:client")
    response = broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET, reset_fields(T0))
    assert (response.code, response.remark) == (
        ResponseCode.CONSUMER_NOT_ONLINE, "Consumer not online, so can not reset offset, "
        f"Group: G Topic: T Timestamp: {T0}")
    register_consumer(broker, "G", ["T"], Channel("0:old", "1.2.3.4:6", 0, 27,
                                                  broker.sent.append))
    broker.sent.clear()
    response = broker.call(C.INVOKE_BROKER_TO_RESET_OFFSET, reset_fields(T0))
    assert response.code == ResponseCode.SYSTEM_ERROR and "does not support" in response.remark
    assert broker.metadata.offsets.consumer_offsets("G", "T") == {0: 10, 1: 4} and broker.sent == []


def test_consumer_status_is_asked_of_each_client(reset_broker):
    broker = reset_broker
    client_body = (b'{"messageQueueTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}'
                   b':3}}')

    async def scenario():
        request = create_request(C.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
                                 {"topic": "T", "group": "G"})
        answered = asyncio.ensure_future(answer_later(broker, broker.sent, body=client_body))
        response = await HANDLERS[request.code](broker.ctx, broker.channel, request)
        await answered
        return response
    response = asyncio.run(scenario())
    forwarded, = broker.sent
    assert (forwarded.code, forwarded.ext_fields) == (C.GET_CONSUMER_STATUS_FROM_CLIENT,
                                                      {"topic": "T", "group": "G"})
    assert response.code == ResponseCode.SUCCESS
    document = fastjson.loads(response.body)
    assert document["messageQueueTable"] == {}
    (key, offset), = document["consumerTable"]["client-1"].items()
    assert (orjson.loads(key), offset) == ({"brokerName": BROKER, "queueId": 1, "topic": "T"},
                                           3)
    response = broker.call(C.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
                           {"topic": "T", "group": "Nobody"})
    assert (response.code, response.remark) == (
        ResponseCode.SYSTEM_ERROR, "No Any Consumer online in the consumer group: [Nobody]")
