"""The NameServer's route table keeps RocketMQ's registration, expiry and lookup rules (protocol.md
§2.11).

Method: drive a RouteInfoManager directly with registrations of masters and slaves, DataVersion
changes, unregistrations, closed channels and clock values, and check its tables and the routes,
cluster info and topic lists it reports.
"""
import pytest

from pybroker.namesrv.route_table import BROKER_CHANNEL_EXPIRED_TIME_MS, RouteInfoManager
from pybroker.protocol.bodies import DataVersion, QueueData

NOW_MS = 1_700_000_000_000


def topic_config(name, queues=4, perm=6, sys_flag=0):
    return {"topicName": name, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": sys_flag, "order": False}


def register(table, broker_name="broker-a", broker_id=0, address="10.0.0.1:10911",
             topics=("TopicA",), version=None, cluster="DefaultCluster",
             channel="channel-a", now_ms=NOW_MS, queues=4, **keywords):
    configs = {name: topic_config(name, queues) for name in topics}
    version = DataVersion(1, 1) if version is None else version
    return table.register_broker(cluster, address, broker_name, broker_id,
                                 address.replace("10911", "10912"), version, configs, [],
                                 channel, now_ms, **keywords)


def test_master_registration_builds_route_cluster_and_topic_list():
    table = RouteInfoManager()
    result = register(table, topics=("TopicA", "TopicB"))
    assert result.master_address is None and result.ha_server_address is None
    route = table.topic_route("TopicA")
    assert route.queue_datas == [QueueData("broker-a", 4, 4, 6, 0)]
    assert [(b.broker_name, b.cluster, b.broker_addrs) for b in route.broker_datas] == [
        ("broker-a", "DefaultCluster", {0: "10.0.0.1:10911"})]
    assert table.topic_route("Unknown") is None
    info = table.cluster_info()
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.1:10911"}
    assert table.all_topics() == ["TopicA", "TopicB"]
    assert table.topics_by_cluster("DefaultCluster") == ["TopicA", "TopicB"]
    assert table.topics_by_cluster("OtherCluster") == []


def test_routes_are_copies():
    table = RouteInfoManager()
    register(table)
    route = table.topic_route("TopicA")
    route.broker_datas[0].broker_addrs[5] = "x:1"
    route.queue_datas[0].perm = 0
    again = table.topic_route("TopicA")
    assert again.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911"}
    assert again.queue_datas[0].perm == 6


def test_topic_data_only_taken_when_data_version_changes():
    table = RouteInfoManager()
    register(table, topics=("TopicA",), version=DataVersion(1, 1), queues=4)
    # Same version, different content: ignored (the broker's version says nothing changed).
    register(table, topics=("TopicA", "TopicNew"), version=DataVersion(1, 1), queues=8)
    assert table.all_topics() == ["TopicA"]
    assert table.topic_route("TopicA").queue_datas[0].read_queue_nums == 4
    register(table, topics=("TopicA", "TopicNew"), version=DataVersion(2, 2), queues=8)
    assert table.all_topics() == ["TopicA", "TopicNew"]
    assert table.topic_route("TopicA").queue_datas[0].write_queue_nums == 8


def test_slave_adds_address_only_and_learns_its_master():
    table = RouteInfoManager()
    register(table, topics=("TopicA",))
    result = register(table, broker_id=1, address="10.0.0.2:10911", topics=("SlaveOnly",),
                      channel="channel-b", version=DataVersion(9, 9))
    assert result.master_address == "10.0.0.1:10911"
    assert result.ha_server_address == "10.0.0.1:10912"
    assert table.all_topics() == ["TopicA"]
    assert table.topic_route("TopicA").broker_datas[0].broker_addrs == {
        0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}


def test_slave_without_master_gets_no_master_address():
    table = RouteInfoManager()
    result = register(table, broker_id=1, address="10.0.0.2:10911")
    assert result.master_address is None
    assert table.topic_route("TopicA") is None   # no queue data from a slave
    assert table.cluster_info().broker_addr_table["broker-a"].broker_addrs == {
        1: "10.0.0.2:10911"}


def test_promoted_slave_keeps_one_entry_per_address():
    table = RouteInfoManager()
    register(table, broker_id=1, address="10.0.0.2:10911")
    register(table, broker_id=0, address="10.0.0.2:10911")
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.2:10911"}
    # Its first registration as master counts as "first": topics are taken.
    assert table.all_topics() == ["TopicA"]


def test_unregister_removes_address_then_broker_cluster_and_topics():
    table = RouteInfoManager()
    register(table)
    register(table, broker_id=1, address="10.0.0.2:10911", channel="channel-b")
    table.unregister_broker("DefaultCluster", "10.0.0.2:10911", "broker-a", 1)
    assert table.topic_route("TopicA").broker_datas[0].broker_addrs == {0: "10.0.0.1:10911"}
    assert "10.0.0.2:10911" not in table.broker_live_table
    table.unregister_broker("DefaultCluster", "10.0.0.1:10911", "broker-a", 0)
    assert table.topic_route("TopicA") is None
    assert table.all_topics() == []
    assert table.cluster_info().cluster_addr_table == {}
    table.unregister_broker("DefaultCluster", "10.0.0.1:10911", "broker-a", 0)   # idempotent


def test_topic_shared_by_two_brokers_survives_losing_one():
    table = RouteInfoManager()
    register(table, broker_name="broker-a", address="10.0.0.1:10911", channel="ca")
    register(table, broker_name="broker-b", address="10.0.0.3:10911", channel="cb")
    route = table.topic_route("TopicA")
    assert [q.broker_name for q in route.queue_datas] == ["broker-a", "broker-b"]
    assert table.channel_closed("ca") == ["10.0.0.1:10911"]
    route = table.topic_route("TopicA")
    assert [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert [b.broker_name for b in route.broker_datas] == ["broker-b"]
    assert table.cluster_info().cluster_addr_table == {"DefaultCluster": ["broker-b"]}


def test_channel_closed_by_unknown_channel_uses_remote_address_fallback():
    table = RouteInfoManager()
    register(table, channel=None)
    assert table.channel_closed("other-channel") == []
    assert table.topic_route("TopicA") is not None
    assert table.channel_closed("other", remote_address="10.0.0.1:10911") == ["10.0.0.1:10911"]
    assert table.topic_route("TopicA") is None


def test_scan_not_active_expires_after_120_seconds():
    table = RouteInfoManager()
    register(table, channel="ca", now_ms=NOW_MS)
    assert BROKER_CHANNEL_EXPIRED_TIME_MS == 120_000
    assert table.scan_not_active(NOW_MS + 120_000) == []
    register(table, channel="ca", now_ms=NOW_MS + 60_000)   # re-registration refreshes
    assert table.scan_not_active(NOW_MS + 150_000) == []
    assert table.scan_not_active(NOW_MS + 180_001) == [("10.0.0.1:10911", "ca")]
    assert table.topic_route("TopicA") is None
    assert table.broker_live_table == {}


def test_heartbeat_timeout_header_and_timestamp_update():
    table = RouteInfoManager(broker_channel_expired_time_ms=50_000)
    register(table, address="10.0.0.1:10911", channel="ca", heartbeat_timeout_ms=10_000)
    register(table, broker_name="broker-b", address="10.0.0.3:10911", channel="cb")
    assert table.scan_not_active(NOW_MS + 10_001) == [("10.0.0.1:10911", "ca")]
    table.update_broker_timestamp("10.0.0.3:10911", NOW_MS + 40_000)
    table.update_broker_timestamp("10.9.9.9:1", NOW_MS)   # unknown: ignored
    assert table.scan_not_active(NOW_MS + 80_000) == []
    assert table.scan_not_active(NOW_MS + 90_001) == [("10.0.0.3:10911", "cb")]


def test_data_version_queries():
    table = RouteInfoManager()
    assert table.is_broker_topic_config_changed("10.0.0.1:10911", DataVersion(1, 1))
    assert table.broker_data_version("10.0.0.1:10911") is None
    register(table, version=DataVersion(5, 7))
    assert not table.is_broker_topic_config_changed("10.0.0.1:10911", DataVersion(5, 7))
    assert table.is_broker_topic_config_changed("10.0.0.1:10911", DataVersion(5, 8))
    assert table.broker_data_version("10.0.0.1:10911") == DataVersion(5, 7)


def test_wipe_write_perm_counts_topics_of_that_broker():
    table = RouteInfoManager()
    register(table, topics=("TopicA", "TopicB"))
    register(table, broker_name="broker-b", address="10.0.0.3:10911", channel="cb",
             topics=("TopicA",))
    assert table.wipe_write_perm("broker-a") == 2
    assert table.wipe_write_perm("broker-zzz") == 0
    perms = {q.broker_name: q.perm for q in table.topic_route("TopicA").queue_datas}
    assert perms == {"broker-a": 4, "broker-b": 6}


def test_delete_topic_everywhere_or_in_one_cluster():
    table = RouteInfoManager()
    register(table, topics=("TopicA", "TopicB"))
    register(table, broker_name="broker-c", address="10.0.0.5:10911", channel="cc",
             cluster="OtherCluster", topics=("TopicA",))
    table.delete_topic("TopicA", "OtherCluster")
    assert [q.broker_name for q in table.topic_route("TopicA").queue_datas] == ["broker-a"]
    assert table.topics_by_cluster("OtherCluster") == []
    table.delete_topic("TopicA", "DefaultCluster")
    assert table.topic_route("TopicA") is None
    table.delete_topic("TopicB")
    table.delete_topic("Missing")
    table.delete_topic("Missing", "DefaultCluster")
    assert table.all_topics() == []


def test_filter_servers_appear_in_route_and_vanish_on_empty_list():
    table = RouteInfoManager()
    configs = {"TopicA": topic_config("TopicA")}
    table.register_broker("C", "10.0.0.1:10911", "b", 0, None, DataVersion(1, 1), configs,
                          ["10.0.0.1:3000"], "ch", NOW_MS)
    assert table.topic_route("TopicA").filter_server_table == {
        "10.0.0.1:10911": ["10.0.0.1:3000"]}
    table.register_broker("C", "10.0.0.1:10911", "b", 0, None, DataVersion(1, 1), configs, [],
                          "ch", NOW_MS)
    assert table.topic_route("TopicA").filter_server_table == {}


def test_enable_acting_master_is_recorded():
    table = RouteInfoManager()
    register(table, enable_acting_master=True)
    assert table.topic_route("TopicA").broker_datas[0].enable_acting_master is True


def test_bad_expiry_rejected():
    with pytest.raises(ValueError):
        RouteInfoManager(broker_channel_expired_time_ms=0)
