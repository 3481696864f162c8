"""Route-derived queue lists, queue selectors and latency fault avoidance behave as specified.

Method: build TopicRouteData values by hand (permissions, missing masters, several brokers),
and check the writable/readable queue lists, the round-robin cursor skipping the last failed and
isolated brokers, the three selectors (hash against Java String.hashCode vectors), and the
isolation table, with real clock waits kept to zero by using latencies that isolate for 0 ms.
"""
import pytest

from pybroker.client.route import (LatencyFaultTolerance, SelectByHash, SelectManual,
                                   SelectRoundRobin, TopicPublishInfo, publish_queues,
                                   subscribe_queues)
from pybroker.protocol.bodies import BrokerData, MessageQueue, QueueData, TopicRouteData


def _route(*brokers) -> TopicRouteData:
    queue_datas, broker_datas = [], []
    for name, perm, queues, has_master in brokers:
        queue_datas.append(QueueData(name, queues, queues, perm))
        addresses = {0: f"127.0.0.1:{1000 + len(broker_datas)}"} if has_master else {1: "x:1"}
        broker_datas.append(BrokerData("C", name, addresses))
    return TopicRouteData(queue_datas, broker_datas)


def test_publish_queues_need_write_perm_and_a_master():
    route = _route(("b", 6, 2, True), ("a", 6, 3, True), ("ro", 4, 2, True),
                   ("noMaster", 6, 2, False))
    queues = publish_queues("T", route)
    assert [(q.broker_name, q.queue_id) for q in queues] == [
        ("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    readable = subscribe_queues("T", route)
    assert {q.broker_name for q in readable} == {"a", "b", "ro", "noMaster"}
    assert readable == sorted(readable, key=lambda q: (q.topic, q.broker_name, q.queue_id))


def test_select_queue_rotates_and_avoids_last_broker():
    info = TopicPublishInfo("T", _route(("a", 6, 2, True), ("b", 6, 2, True)))
    picks = [info.select_queue() for _ in range(8)]
    assert len(set(picks)) == 4
    for _ in range(10):
        assert info.select_queue(last_broker_name="a").broker_name == "b"
    only_a = TopicPublishInfo("T", _route(("a", 6, 2, True)))
    assert only_a.select_queue(last_broker_name="a").broker_name == "a"   # nothing else left
    with pytest.raises(IndexError):
        TopicPublishInfo("T", _route(("ro", 4, 2, True))).select_queue()


def test_fault_tolerance_isolates_slow_and_failed_brokers():
    faults = LatencyFaultTolerance()
    faults.update("fast", 10)
    faults.update("slow", 600)       # >= 550 ms: isolated for 30 s
    faults.update("dead", 5, failed=True)
    assert faults.is_available("fast") and faults.is_available("unknown")
    assert not faults.is_available("slow") and not faults.is_available("dead")
    assert faults.least_bad() == "slow"   # 30 s beats the failed broker's 600 s
    faults.update("slow", 20)
    assert faults.is_available("slow")
    info = TopicPublishInfo("T", _route(("dead", 6, 4, True), ("fast", 6, 1, True)))
    assert {info.select_queue(None, faults).broker_name for _ in range(10)} == {"fast"}


def _java_string_hash(text: str) -> int:
    # Oracle: String.hashCode over UTF-16 code units, wrapping to a signed 32-bit int.
    value = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def test_select_by_hash_uses_java_string_hash():
    queues = [MessageQueue("T", "a", i) for i in range(7)]
    select = SelectByHash()
    assert select(queues, None, "abc") == queues[96354 % 7]   # "abc".hashCode() == 96354
    for key in ("order-1", "订单-42", "x" * 40):
        assert select(queues, None, key) == queues[abs(_java_string_hash(key)) % 7]
    assert select(queues, None, -15) == queues[15 % 7]
    assert select(queues, None, "order-1") == select(queues, None, "order-1")
    with pytest.raises(TypeError):
        select(queues, None, 1.5)


def test_round_robin_and_manual_selectors():
    queues = [MessageQueue("T", "a", i) for i in range(3)]
    robin = SelectRoundRobin()
    assert [robin(queues, None, None).queue_id for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    manual = SelectManual()
    assert manual(queues, None, 2) == queues[2]
    assert manual(queues, None, queues[1]) == queues[1]
    for bad in (3, -1, True, MessageQueue("T", "b", 0), "0"):
        with pytest.raises(ValueError):
            manual(queues, None, bad)


def test_subscribe_address_follows_the_suggestion_and_falls_back_to_any_broker():
    """Java's findBrokerAddressInSubscribe: the suggested id, a slave id + 1, else (not only
    this broker) the lowest id routed - the slave once the master left the route."""
    from pybroker.client.instance import ClientInstance
    instance = ClientInstance("127.0.0.1:9876", client_ip="127.0.0.1", instance_name="t")
    queue = MessageQueue("T", "b", 0)
    assert instance.pull_from_which_node(queue) == 0
    instance.broker_addresses["b"] = {0: "m:1", 1: "s:1"}
    assert instance.broker_address_for_subscribe("b", 0) == "m:1"
    instance.suggest_pull_from(queue, 1)
    assert instance.broker_address_for_subscribe("b", instance.pull_from_which_node(queue)) \
        == "s:1"
    instance.broker_addresses["b"] = {0: "m:1", 2: "s:2"}
    assert instance.broker_address_for_subscribe("b", 1) == "s:2"       # id + 1
    instance.broker_addresses["b"] = {1: "s:1"}                         # master gone
    assert instance.broker_address_for_subscribe("b", 0) == "s:1"
    assert instance.broker_address_for_subscribe("b", 0, only_this_broker=True) is None
    assert instance.broker_address_for_subscribe("unknown", 0) is None
