"""MetadataState keeps topics, groups, offsets, clients and locks as the Java broker does.

Method: real MetadataState objects over config documents in tmp_path (restarts are new objects
over the same directory), Java-written golden documents copied in, an injected clock for
expiry and lock leases, and Channels whose send appends to a list; replicas are fed the bytes
of snapshot().
"""
import asyncio
import os
import shutil

import pytest

from pybroker.broker.channel import Channel
from pybroker.broker.managers.client_channel import make_channel_info
from pybroker.broker.managers.rebalance_lock import REBALANCE_LOCK_LEASE_MS
from pybroker.broker.metadata import CHANNEL_EXPIRED_TIMEOUT_MS, MetadataReplica, MetadataState
from pybroker.config import load_broker_config
from pybroker.protocol.bodies import MessageQueue, build_subscription
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import create_request, create_response
from pybroker.protocol.constants import (
    ConsumeFromWhere, ConsumeType, MessageModel, Perm, SystemTopic)
from pybroker.store import config_docs, paths
from pybroker.store.config_docs import SubscriptionGroupConfig, TopicConfig

GOLDEN_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "golden", "config")
BROKER = "broker-a"
CLUSTER = "DefaultCluster"


class Clock:
    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def make_config(tmp_path, **overrides):
    values = {"brokerName": BROKER, "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1",
              "storePathRootDir": str(tmp_path), "namesrvAddr": "127.0.0.1:9876"}
    values.update(overrides)
    return load_broker_config(overrides=values)


def make_state(tmp_path, clock=None, on_change=None, **overrides) -> MetadataState:
    return MetadataState(make_config(tmp_path, **overrides), now_ms=clock or Clock(),
                         on_change=on_change)


def make_channel(name: str, sent: list | None = None) -> Channel:
    sent = [] if sent is None else sent
    return Channel(f"0:{name}", f"10.0.0.{len(name)}:5000{len(name)}", 0, 409, sent.append)


def register(state, group, channel, client_id, topics=("TopicTest",), sub_version=1):
    subscriptions = [build_subscription(t, "*", sub_version=sub_version) for t in topics]
    return state.consumers.register_consumer(group, make_channel_info(channel, client_id, 0),
                                   ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
                                   ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, subscriptions)


def notified_groups(sent: list) -> list[str]:
    assert all(c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and c.is_oneway for c in sent)
    return [command.ext_fields["consumerGroup"] for command in sent]


# --- topics -----------------------------------------------------------------------------------
def test_system_topics_follow_the_config_switches(tmp_path):
    state = make_state(tmp_path)
    template = state.topic_config(SystemTopic.AUTO_CREATE_TEMPLATE)
    assert (template.write_queue_nums, template.perm) == (8, 7)
    assert state.topic_config(SystemTopic.SCHEDULE).read_queue_nums == 18
    assert state.topic_config(SystemTopic.BENCHMARK).write_queue_nums == 1024
    assert state.topic_config(CLUSTER).perm == 7 and state.topic_config(BROKER).perm == 7
    assert state.topic_config(CLUSTER + "_REPLY_TOPIC").write_queue_nums == 1
    assert state.topic_config(SystemTopic.TRACE) is None
    assert state.topics.is_system_topic(BROKER) and state.topics.is_system_topic("rmq_sys_wheel")
    assert not state.topics.is_system_topic("TopicTest")
    other = make_state(tmp_path / "off", autoCreateTopicEnable="false",
                       traceTopicEnable="true", clusterTopicEnable="false",
                       brokerTopicEnable="false", defaultTopicQueueNums="4")
    assert other.topic_config(SystemTopic.AUTO_CREATE_TEMPLATE) is None
    assert other.topic_config(SystemTopic.TRACE).write_queue_nums == 1
    assert other.topic_config(CLUSTER).perm == Perm.INHERIT
    assert other.topic_config(BROKER).perm == Perm.INHERIT


def test_auto_create_from_template_persists_and_bumps_version(tmp_path):
    changes = []
    state = make_state(tmp_path, on_change=changes.append)
    counter = state.topics.data_version.counter
    created = asyncio.run(state.create_topic_on_send("NewTopic", "TBW102", 4, 0))
    assert (created.read_queue_nums, created.write_queue_nums, created.perm) == (4, 4, 6)
    capped = asyncio.run(state.create_topic_on_send("BigTopic", "TBW102", 64, 0))
    assert capped.write_queue_nums == 8
    assert state.topics.data_version.counter == counter + 2
    assert changes == ["topics", "topics"]
    again = asyncio.run(state.create_topic_on_send("NewTopic", "TBW102", 2, 0))
    assert again is created and state.topics.data_version.counter == counter + 2
    restarted = make_state(tmp_path)
    assert restarted.topic_config("NewTopic") == created
    assert restarted.topics.data_version.counter == counter + 2


def test_auto_create_refused_without_inherit_and_retry_falls_back_to_one_queue(tmp_path):
    state = make_state(tmp_path)
    assert asyncio.run(state.create_topic_on_send("T", "NoSuchTemplate", 4)) is None
    assert asyncio.run(state.create_topic_on_send("T", SystemTopic.BENCHMARK, 4)) is None
    retry = asyncio.run(state.create_topic_on_send("%RETRY%G", "NoSuchTemplate", 4))
    assert (retry.write_queue_nums, retry.perm) == (1, 6)
    # topics.json keeps TBW102 from an earlier run, but the switch is now off.
    off = make_state(tmp_path, autoCreateTopicEnable="false")
    assert off.topic_config("TBW102") is not None
    assert asyncio.run(off.create_topic_on_send("T2", "TBW102", 4)) is None


def test_update_and_delete_topic(tmp_path):
    state = make_state(tmp_path)
    counter = state.topics.data_version.counter
    state.topics.update_topic_config(TopicConfig("Orders", 2, 3, 6, order=True))
    assert state.topics.delete_topic_config("Missing") is None
    assert state.topics.data_version.counter == counter + 1
    assert make_state(tmp_path).topic_config("Orders").write_queue_nums == 3
    assert state.topics.delete_topic_config("Orders").read_queue_nums == 2
    assert make_state(tmp_path).topic_config("Orders") is None
    assert state.topics.data_version.counter == counter + 2


def test_java_written_documents_load(tmp_path):
    config_dir = paths.config_dir(str(tmp_path))
    os.makedirs(config_dir)
    for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json"):
        shutil.copy(os.path.join(GOLDEN_CONFIG, name), config_dir)
    state = make_state(tmp_path)
    assert state.topic_config("TopicTest").write_queue_nums == 4
    assert state.topic_config("%RETRY%GroupA").write_queue_nums == 1
    assert state.topics.data_version.counter == 12
    slow = state.subscription_group("GroupSlow")
    assert (slow.consume_enable, slow.retry_max_times, slow.retry_queue_nums) == (False, 3, 2)
    document = config_docs.load_consumer_offsets(os.path.join(config_dir,
                                                              "consumerOffset.json"))
    for key, queues in document.offset_table.items():
        topic, group = key.split("@")
        for queue_id, consumer_offset in queues.items():
            assert state.offsets.query(group, topic, queue_id) == consumer_offset
    assert state.topic_config(SystemTopic.SCHEDULE) is not None   # system topics added


def test_java_5x_topics_keep_their_additions_through_a_change(tmp_path):
    config_dir = paths.config_dir(str(tmp_path))
    os.makedirs(config_dir)
    shutil.copy(os.path.join(GOLDEN_CONFIG, "topics-5x.json"),
                os.path.join(config_dir, "topics.json"))
    state = make_state(tmp_path)
    order_topic = state.topic_config("OrderTopic")
    assert (order_topic.order, order_topic.attributes) == (True, {"message.type": "FIFO"})
    state.topics.update_topic_config(TopicConfig("Other", 1, 1))
    restarted = make_state(tmp_path)
    assert restarted.topic_config("OrderTopic") == order_topic
    version = restarted.topics.data_version
    assert (version.counter, version.state_version) == (4, 0)


# --- groups and offsets -----------------------------------------------------------------------
def test_subscription_groups_auto_create_and_persist(tmp_path):
    state = make_state(tmp_path)
    assert state.groups.has_subscription_group("TOOLS_CONSUMER")
    assert not state.groups.has_subscription_group("GroupA")
    assert state.subscription_group("GroupA").retry_max_times == 16
    assert make_state(tmp_path).groups.has_subscription_group("GroupA")
    strict = make_state(tmp_path / "strict", autoCreateSubscriptionGroup="false")
    assert strict.subscription_group("GroupB") is None
    assert strict.subscription_group("CID_RMQ_SYS_X") is not None
    state.groups.update_subscription_group(SubscriptionGroupConfig("GroupC", retry_queue_nums=3))
    assert state.groups.delete_subscription_group("GroupA") is not None
    restarted = make_state(tmp_path)
    assert restarted.groups.subscription_groups()["GroupC"].retry_queue_nums == 3
    assert not restarted.groups.has_subscription_group("GroupA")


def test_offsets_commit_query_and_persist_through_restart(tmp_path):
    state = make_state(tmp_path)
    assert state.offsets.query("G", "T", 0) == -1
    asyncio.run(state.commit_offset("G", "T", 0, 42))
    state.offsets.commit("G", "T", 3, 7)
    state.offsets.commit("G2", "T", 0, 1)
    offsets = state.offsets
    assert (offsets.query("G", "T", 0), offsets.query("G", "T", 3), offsets.query("G", "T", 1)) == \
        (42, 7, -1)
    assert make_state(tmp_path).offsets.query("G", "T", 0) == -1   # not yet persisted
    assert state.persist_if_dirty() is True
    assert state.persist_if_dirty() is False
    assert make_state(tmp_path).offsets.query("G", "T", 0) == 42
    state.offsets.commit("G", "T", 0, 50)
    state.shutdown()
    restarted = make_state(tmp_path)
    assert restarted.offsets.query("G", "T", 0) == 50
    assert restarted.offsets.groups_of_topic("T") == {"G", "G2"}
    restarted.offsets.remove_offsets_of_group("G")
    assert restarted.offsets.topics_of_group("G") == set()
    assert restarted.offsets.query("G2", "T", 0) == 1
    restarted.offsets.remove_offsets_of_topic("T")
    assert restarted.offsets.query("G2", "T", 0) == -1


# --- clients ------------------------------------------------------------------------------------
def test_join_and_leave_notify_the_group(tmp_path):
    state = make_state(tmp_path)
    sent_a, sent_b = [], []
    channel_a, channel_b = make_channel("a", sent_a), make_channel("bb", sent_b)
    assert register(state, "G", channel_a, "client-a") is True
    assert notified_groups(sent_a) == ["G"]
    assert register(state, "G", channel_a, "client-a") is False   # plain heartbeat
    assert len(sent_a) == 1
    assert register(state, "G", channel_b, "client-b") is True
    assert notified_groups(sent_a) == ["G", "G"] and notified_groups(sent_b) == ["G"]
    assert state.consumers.consumer_client_ids("G") == ["client-a", "client-b"]
    state.channel_closed(channel_b.channel_id)
    assert notified_groups(sent_a) == ["G"] * 3 and len(sent_b) == 1
    assert state.consumers.consumer_client_ids("G") == ["client-a"]
    state.channel_closed(channel_a.channel_id)
    assert state.consumers.consumer_group_info("G") is None and len(sent_a) == 3


def test_subscription_changes_and_versions(tmp_path):
    changes = []
    state = make_state(tmp_path, on_change=changes.append)
    channel = make_channel("a")
    register(state, "G", channel, "c", topics=("T1",), sub_version=1)
    assert state.consumer_subscription("G", "T1").sub_version == 1
    assert register(state, "G", channel, "c", topics=("T1",), sub_version=2) is False
    assert state.consumer_subscription("G", "T1").sub_version == 2
    assert register(state, "G", channel, "c", topics=("T2",), sub_version=3) is True
    assert state.consumer_subscription("G", "T1") is None
    assert state.consumers.consumer_groups_of_topic("T2") == {"G"}
    assert changes.count("subscriptions") == 3 and state.consumers.subscription_version == 3


def test_notify_respects_broker_and_group_switches(tmp_path):
    sent = []
    state = make_state(tmp_path)
    state.groups.update_subscription_group(SubscriptionGroupConfig(
        "Quiet", notify_consumer_ids_changed_enable=False))
    register(state, "Quiet", make_channel("a", sent), "c")
    off = make_state(tmp_path / "off", notifyConsumerIdsChangedEnable="false")
    register(off, "G", make_channel("b", sent), "c")
    assert sent == []


def test_idle_channels_expire_after_120_seconds(tmp_path):
    clock = Clock()
    state = make_state(tmp_path, clock=clock)
    sent = []
    old, fresh = make_channel("old"), make_channel("fresh", sent)
    register(state, "G", old, "c-old")
    state.producers.register_producer("P", make_channel_info(old, "c-old", 0))
    clock.now_ms += CHANNEL_EXPIRED_TIMEOUT_MS // 2
    register(state, "G", fresh, "c-fresh")
    state.producers.register_producer("P", make_channel_info(fresh, "c-fresh", 0))
    clock.now_ms += CHANNEL_EXPIRED_TIMEOUT_MS // 2
    assert state.scan_expired() == set()       # exactly 120 s idle is not yet "> 120 s"
    clock.now_ms += 1
    sent.clear()
    assert state.scan_expired() == {old.channel_id}
    assert state.consumers.consumer_client_ids("G") == ["c-fresh"]
    assert notified_groups(sent) == ["G"]
    assert [c.channel_id for c in state.producers.producer_channels("P")] == [fresh.channel_id]
    assert state.scan_expired(clock.now_ms + CHANNEL_EXPIRED_TIMEOUT_MS) == {fresh.channel_id}
    assert state.consumers.consumer_group_info("G") is None
    assert state.producers.producer_channels("P") == []


def test_producers_register_and_unregister(tmp_path):
    state = make_state(tmp_path)
    first, second = make_channel("a"), make_channel("bb")
    state.producers.register_producer("P", make_channel_info(first, "c1", 0))
    state.producers.register_producer("P", make_channel_info(second, "c2", 0))
    state.producers.register_producer("P", make_channel_info(first, "c1", 0))
    assert state.producers.producer_channels("P") == [first, second]
    assert state.producers.unregister_producer("P", first.channel_id) is True
    assert state.producers.unregister_producer("P", first.channel_id) is False
    state.channel_closed(second.channel_id)
    assert state.producers.producer_channels("P") == []
    assert "P" not in state.producers.producer_groups


# --- locks -------------------------------------------------------------------------------------
def test_rebalance_locks_lease_renew_and_expire(tmp_path):
    clock = Clock()
    state = make_state(tmp_path, clock=clock)
    queues = [MessageQueue("T", BROKER, queue_id) for queue_id in range(3)]
    assert state.locks.try_lock_batch("G", queues[:2], "c1") == queues[:2]
    assert state.locks.try_lock_batch("G", queues, "c2") == queues[2:]
    assert state.locks.try_lock_batch("Other", queues[:1], "c2") == queues[:1]   # per group
    clock.now_ms += REBALANCE_LOCK_LEASE_MS
    assert state.locks.try_lock_batch("G", queues[1:2], "c2") == []   # exactly 60 s: still held
    assert state.locks.try_lock_batch("G", queues[:1], "c1", only_this_broker=False) == queues[:1]
    clock.now_ms += 1
    # queue 1 was not renewed by c1: its lease is over and c2 takes it; queue 0 was renewed.
    assert state.locks.try_lock_batch("G", queues[:2], "c2") == queues[1:2]
    assert state.locks.is_locked("G", queues[0], "c1")
    assert not state.locks.is_locked("G", queues[0], "c2")
    state.locks.unlock_batch("G", queues[:1], "c2")          # not the owner: no effect
    assert state.locks.is_locked("G", queues[0], "c1")
    state.locks.unlock_batch("G", queues[:1], "c1")
    assert state.locks.try_lock_batch("G", queues[:1], "c2") == queues[:1]


# --- replicas and client calls ----------------------------------------------------------------
def test_replica_applies_snapshots_and_delegates_writes(tmp_path):
    state = make_state(tmp_path)
    state.topics.update_topic_config(TopicConfig("Orders", 2, 2))
    register(state, "G", make_channel("a"), "c", topics=("Orders",), sub_version=5)
    calls = []

    async def create_topic(topic, default_topic, queue_nums, topic_sys_flag):
        calls.append(("create", topic, default_topic, queue_nums, topic_sys_flag))
        return state.topics.create_topic_on_send(topic, default_topic, queue_nums, topic_sys_flag)

    async def commit_offset(group, topic, queue_id, consumer_offset):
        calls.append(("commit", group, topic, queue_id, consumer_offset))

    async def create_send_back_topic(topic, queue_nums, perm, topic_sys_flag):
        calls.append(("send back", topic, queue_nums, perm, topic_sys_flag))
        return state.topics.create_topic_for_send_back(topic, queue_nums, perm, topic_sys_flag)

    replica = MetadataReplica(create_topic, commit_offset, create_send_back_topic)
    replica.apply(state.snapshot())
    assert replica.versions == state.versions()
    assert replica.topic_config("Orders") == state.topic_config("Orders")
    assert replica.consumer_subscription("G", "Orders") == state.consumer_subscription(
        "G", "Orders")
    assert replica.subscription_group("TOOLS_CONSUMER") is not None
    assert replica.subscription_group("Unknown").group_name == "Unknown"   # auto-create on
    created = asyncio.run(replica.create_topic_on_send("New", "TBW102", 3))
    assert created.write_queue_nums == 3 and replica.topic_config("New") == created
    assert asyncio.run(replica.create_topic_on_send("Orders", "TBW102", 3)).read_queue_nums == 2
    asyncio.run(replica.commit_offset("G", "Orders", 1, 9))
    assert calls == [("create", "New", "TBW102", 3, 0), ("commit", "G", "Orders", 1, 9)]
    retry = asyncio.run(replica.create_topic_for_send_back("%RETRY%G", 2, 6))
    assert (retry.write_queue_nums, retry.perm) == (2, 6) and replica.topic_config("%RETRY%G")
    assert asyncio.run(replica.create_topic_for_send_back("%RETRY%G", 5, 6)) is retry
    assert calls[2:] == [("send back", "%RETRY%G", 2, 6, 0)]
    state.topics.delete_topic_config("Orders")
    replica.apply(state.snapshot())
    assert replica.topic_config("Orders") is None and replica.topic_config("New") is not None


def test_replica_rejects_bad_snapshots_and_keeps_its_state(tmp_path):
    state = make_state(tmp_path, autoCreateSubscriptionGroup="false")
    replica = MetadataReplica(None, None, None)
    replica.apply(state.snapshot())
    assert replica.subscription_group("Unknown") is None
    for bad in (b"", b"{", b"[]", b'{"versions":[1]}', b"\xff",
                b'{"versions":[9,9,9,9,9],"topics":[],"groups":{},"subscriptions":{},'
                b'"autoCreateSubscriptionGroup":true}'):
        with pytest.raises(ValueError):
            replica.apply(bad)
    assert replica.topic_config("TBW102") is not None


def test_call_client_correlates_by_channel_and_opaque(tmp_path):
    state = make_state(tmp_path)
    sent = []
    channel = make_channel("a", sent)

    async def scenario():
        request = create_request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"clientId": "c"})
        waiter = asyncio.ensure_future(state.client_calls.call_client(channel, request, 1000))
        await asyncio.sleep(0)
        assert sent == [request]
        answer = create_response(request, 0, body=b"{}")
        assert state.client_calls.complete_client_call("0:other", answer) is False
        assert state.client_calls.complete_client_call(channel.channel_id, answer) is True
        assert await waiter is answer
        late = create_request(RequestCode.GET_CONSUMER_RUNNING_INFO)
        with pytest.raises(TimeoutError):
            await state.client_calls.call_client(channel, late, 10)
        answer = create_response(late, 0)
        assert state.client_calls.complete_client_call(channel.channel_id, answer) is False

    asyncio.run(scenario())


def test_call_client_works_outside_a_task(tmp_path):
    """Eager request tables start handlers in the read callback, with no current task: the
    call must still wait and time out (asyncio.timeout() refused to run there)."""
    state = make_state(tmp_path)
    sent = []
    channel = make_channel("a", sent)

    async def scenario():
        loop = asyncio.get_running_loop()
        outcome = loop.create_future()
        request = create_request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"clientId": "c"})
        answer = create_response(request, 0, body=b"{}")

        def drive(coroutine, value=None):   # how RequestTable steps an eager handler
            try:
                coroutine.send(value)
            except StopIteration as stop:
                outcome.set_result(stop.value)
            except Exception as error:   # the outcome under test, whatever it is
                outcome.set_result(error)
            else:
                waiting = next(iter(state.client_calls._calls.values()), None)
                if waiting is not None:
                    waiting.add_done_callback(lambda done: drive_done(coroutine, done))

        def drive_done(coroutine, done):
            try:
                coroutine.send(None)
            except StopIteration as stop:
                outcome.set_result(stop.value)
            except Exception as error:   # TimeoutError after the timer fired
                outcome.set_result(error)

        loop.call_soon(drive, state.client_calls.call_client(channel, request, 1000))
        await asyncio.sleep(0.01)
        assert sent == [request]
        assert state.client_calls.complete_client_call(channel.channel_id, answer) is True
        assert await outcome is answer
        outcome = loop.create_future()
        loop.call_soon(drive, state.client_calls.call_client(channel, create_request(
            RequestCode.GET_CONSUMER_RUNNING_INFO), 20))
        assert isinstance(await outcome, TimeoutError)

    asyncio.run(scenario())
