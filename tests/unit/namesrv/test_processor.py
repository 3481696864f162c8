"""NameServer handlers answer every protocol.md §2.11 code as a Java NameServer does.

Method: call each handler of NamesrvProcessor directly with RemotingCommands built like the
broker's and clients' requests (registration bodies encoded by pybroker.protocol.bodies, plain
and zlib-compressed), over a real KV config file in tmp_path, and check codes, remarks, header
fields and decoded bodies.
"""
import asyncio

import orjson
import pytest

from pybroker.errors import HeaderError, StoreCorruptError
from pybroker.namesrv.kv_config import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from pybroker.namesrv.processor import NamesrvProcessor
from pybroker.namesrv.route_table import RouteInfoManager
from pybroker.protocol import bodies
from pybroker.protocol.codes import RequestCode as C
from pybroker.protocol.codes import ResponseCode as R
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import MQVersion

BROKER_ADDRESS = "127.0.0.1:10911"


class Peer:
    """The one attribute handlers read from a connection, plus identity as its channel id."""

    def __init__(self, remote_address="127.0.0.1:50000"):
        self.remote_address = remote_address


@pytest.fixture
def clock():
    return [1_700_000_000_000]


@pytest.fixture
def processor(tmp_path, clock):
    kv_config = KVConfigManager(tmp_path / "kvConfig.json")
    kv_config.load()
    return NamesrvProcessor(RouteInfoManager(), kv_config, now_ms=lambda: clock[0])


def call(processor, request, connection=None):
    handler = processor.handlers[request.code]
    return asyncio.run(handler(connection or Peer(), request))


def register_request(topics=("TopicA",), broker_id=0, address=BROKER_ADDRESS, counter=1,
                     compressed=False, crc=True, broker_name="broker-a", extra=None):
    body = bodies.encode_register_broker_body(bodies.RegisterBrokerBody(
        bodies.DataVersion(1_700_000_000_000, counter),
        {name: {"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
         for name in topics}), compressed)
    ext_fields = {"brokerName": broker_name, "brokerAddr": address,
                  "clusterName": "DefaultCluster", "haServerAddr": address[:-1] + "2",
                  "brokerId": str(broker_id), "compressed": "true" if compressed else "false",
                  "bodyCrc32": str(bodies.body_crc32(body)) if crc else "0"}
    ext_fields.update(extra or {})
    return create_request(C.REGISTER_BROKER, ext_fields, body)


def route_request(topic, version=int(MQVersion.V4_9_8), **ext):
    request = create_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, **ext})
    request.version = version
    return request


@pytest.mark.parametrize("compressed", [False, True])
def test_register_then_route(processor, compressed):
    response = call(processor, register_request(compressed=compressed))
    assert (response.code, response.ext_fields, response.body) == (R.SUCCESS, {}, None)
    assert response.is_response
    route_response = call(processor, route_request("TopicA"))
    assert route_response.code == R.SUCCESS
    route = bodies.decode_topic_route(route_response.body)
    assert route.queue_datas == [bodies.QueueData("broker-a", 4, 4, 6, 0)]
    assert route.broker_datas[0].broker_addrs == {0: BROKER_ADDRESS}


def test_route_key_quoting_follows_request_version(processor):
    call(processor, register_request())
    quoted = call(processor, route_request("TopicA", int(MQVersion.V4_9_4))).body
    bare = call(processor, route_request("TopicA", int(MQVersion.V4_9_4) - 1)).body
    asked = call(processor, route_request("TopicA", 317, acceptStandardJsonOnly="true")).body
    assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in quoted
    assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in bare
    assert asked == quoted
    assert orjson.loads(quoted)["queueDatas"][0]["topicSynFlag"] == 0
    assert b" " not in bare and b" " not in quoted


def test_unknown_topic_is_topic_not_exist_with_java_remark(processor):
    response = call(processor, route_request("NoSuchTopic"))
    assert response.code == R.TOPIC_NOT_EXIST == 17
    assert response.remark.startswith(
        "No topic route info in name server for the topic: NoSuchTopic")
    assert response.body is None


def test_register_crc_mismatch_and_bad_body(processor):
    request = register_request()
    request.ext_fields["bodyCrc32"] = str((int(request.ext_fields["bodyCrc32"]) + 1) % 1000)
    response = call(processor, request)
    assert (response.code, response.remark) == (R.SYSTEM_ERROR, "crc32 not match")
    bad = register_request(crc=False)
    bad.body = b"{not json"
    assert call(processor, bad).code == R.SYSTEM_ERROR
    bad_zlib = register_request(crc=False, compressed=True)
    bad_zlib.body = b"\x78\x9c garbage"
    assert call(processor, bad_zlib).code == R.SYSTEM_ERROR
    assert processor.route_table.broker_live_table == {}


def test_register_without_body_and_missing_header_field(processor):
    request = register_request(crc=False)
    request.body = None
    assert call(processor, request).code == R.SUCCESS
    assert processor.route_table.all_topics() == []
    assert processor.route_table.broker_data_version(BROKER_ADDRESS) == bodies.DataVersion(0, 0)
    incomplete = register_request()
    del incomplete.ext_fields["brokerAddr"]
    with pytest.raises(HeaderError, match="brokerAddr"):
        call(processor, incomplete)


def test_slave_registration_answers_master_addresses(processor):
    call(processor, register_request())
    response = call(processor, register_request(broker_id=1, address="127.0.0.2:10911"))
    assert response.ext_fields == {"masterAddr": BROKER_ADDRESS,
                                   "haServerAddr": "127.0.0.1:10912"}


def test_register_answers_order_topic_config_and_route_carries_it(processor):
    processor.kv_config.put(NAMESPACE_ORDER_TOPIC_CONFIG, "TopicA", "broker-a:4")
    response = call(processor, register_request())
    assert bodies.decode_kv_table(response.body) == {"TopicA": "broker-a:4"}
    assert b"orderTopicConf" not in call(processor, route_request("TopicA")).body
    processor.order_message_enable = True
    route = bodies.decode_topic_route(call(processor, route_request("TopicA")).body)
    assert route.order_topic_conf == "broker-a:4"


def test_channel_identity_is_the_connection(processor):
    peer = Peer()
    call(processor, register_request(), peer)
    assert processor.route_table.channel_closed(peer) == [BROKER_ADDRESS]
    assert call(processor, route_request("TopicA")).code == R.TOPIC_NOT_EXIST


def test_unregister_broker(processor):
    call(processor, register_request())
    request = create_request(C.UNREGISTER_BROKER, {
        "brokerName": "broker-a", "brokerAddr": BROKER_ADDRESS, "clusterName": "DefaultCluster",
        "brokerId": "0"})
    assert call(processor, request).code == R.SUCCESS
    assert call(processor, route_request("TopicA")).code == R.TOPIC_NOT_EXIST


def test_cluster_info_topic_lists(processor):
    call(processor, register_request(topics=("TopicA", "TopicB")))
    info = bodies.decode_cluster_info(call(processor, create_request(
        C.GET_BROKER_CLUSTER_INFO)).body)
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: BROKER_ADDRESS}
    every = call(processor, create_request(C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert bodies.decode_topic_list(every.body) == ["TopicA", "TopicB"]
    by_cluster = call(processor, create_request(C.GET_TOPICS_BY_CLUSTER,
                                                {"cluster": "DefaultCluster"}))
    assert bodies.decode_topic_list(by_cluster.body) == ["TopicA", "TopicB"]
    none = call(processor, create_request(C.GET_TOPICS_BY_CLUSTER, {"cluster": "Nope"}))
    assert bodies.decode_topic_list(none.body) == []


def test_kv_put_get_list_delete_and_persistence(processor, tmp_path):
    put = create_request(C.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v1"})
    assert call(processor, put).code == R.SUCCESS
    get = create_request(C.GET_KV_CONFIG, {"namespace": "NS", "key": "k"})
    assert call(processor, get).ext_fields == {"value": "v1"}
    listed = call(processor, create_request(C.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"}))
    assert bodies.decode_kv_table(listed.body) == {"k": "v1"}
    reloaded = KVConfigManager(tmp_path / "kvConfig.json")
    reloaded.load()
    assert reloaded.get("NS", "k") == "v1"
    document = orjson.loads((tmp_path / "kvConfig.json").read_bytes())
    assert document == {"configTable": {"NS": {"k": "v1"}}}
    delete = create_request(C.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k"})
    assert call(processor, delete).code == R.SUCCESS
    missing = call(processor, get)
    assert missing.code == R.QUERY_NOT_FOUND
    assert missing.remark == "No config item, Namespace: NS Key: k"
    unused = call(processor, create_request(C.GET_KVLIST_BY_NAMESPACE, {"namespace": "X"}))
    assert unused.code == R.QUERY_NOT_FOUND


def test_query_data_version(processor, clock):
    call(processor, register_request(counter=3))

    def query(counter):
        return call(processor, create_request(
            C.QUERY_DATA_VERSION, {"brokerName": "broker-a", "brokerAddr": BROKER_ADDRESS,
                                   "clusterName": "DefaultCluster", "brokerId": "0"},
            bodies.encode_data_version(bodies.DataVersion(1_700_000_000_000, counter))))
    clock[0] += 100_000
    same = query(3)
    assert same.ext_fields == {"changed": "false"}
    assert bodies.decode_data_version(same.body).counter == 3
    # "not changed" counts as a heartbeat: still alive 100 s after the query.
    assert processor.route_table.scan_not_active(clock[0] + 100_000) == []
    changed = query(4)
    assert (changed.code, changed.ext_fields) == (R.SUCCESS, {"changed": "true"})
    bad_request = create_request(C.QUERY_DATA_VERSION, {
        "brokerName": "b", "brokerAddr": "a:1", "clusterName": "c", "brokerId": "0"}, b"[")
    assert call(processor, bad_request).code == R.SYSTEM_ERROR


def test_kv_config_reads_java_file_and_refuses_corrupt_one(tmp_path):
    path = tmp_path / "kvConfig.json"
    # fastjson's pretty output of KVConfigSerializeWrapper.
    path.write_text('{\n\t"configTable":{\n\t\t"ORDER_TOPIC_CONFIG":{\n'
                    '\t\t\t"TopicA":"broker-a:4"\n\t\t}\n\t}\n}')
    kv_config = KVConfigManager(path)
    kv_config.load()
    assert kv_config.get(NAMESPACE_ORDER_TOPIC_CONFIG, "TopicA") == "broker-a:4"
    path.write_text('{"configTable": [1]}')
    with pytest.raises(StoreCorruptError):
        KVConfigManager(path).load()


def test_wipe_write_perm_and_delete_topic(processor):
    call(processor, register_request(topics=("TopicA", "TopicB")))
    wiped = call(processor, create_request(C.WIPE_WRITE_PERM_OF_BROKER,
                                           {"brokerName": "broker-a"}))
    assert wiped.ext_fields == {"wipeTopicCount": "2"}
    route = bodies.decode_topic_route(call(processor, route_request("TopicA")).body)
    assert route.queue_datas[0].perm == 4
    delete = create_request(C.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicA"})
    assert call(processor, delete).code == R.SUCCESS
    assert call(processor, route_request("TopicA")).code == R.TOPIC_NOT_EXIST
    scoped = create_request(C.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicB",
                                                        "clusterName": "Other"})
    call(processor, scoped)
    assert call(processor, route_request("TopicB")).code == R.SUCCESS


def test_broker_heartbeat_refreshes_and_is_silent_when_oneway(processor, clock):
    call(processor, register_request())
    request = create_request(C.BROKER_HEARTBEAT, {
        "clusterName": "DefaultCluster", "brokerAddr": BROKER_ADDRESS,
        "brokerName": "broker-a"}, oneway=True)
    clock[0] += 100_000
    assert call(processor, request) is None
    assert processor.route_table.scan_not_active(clock[0] + 100_000) == []
    request.flag = 0
    assert call(processor, request).code == R.SUCCESS


def test_every_namesrv_code_has_a_handler(processor):
    expected = {C.PUT_KV_CONFIG, C.GET_KV_CONFIG, C.DELETE_KV_CONFIG, C.REGISTER_BROKER,
                C.UNREGISTER_BROKER, C.GET_ROUTEINFO_BY_TOPIC, C.GET_BROKER_CLUSTER_INFO,
                C.WIPE_WRITE_PERM_OF_BROKER, C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                C.DELETE_TOPIC_IN_NAMESRV, C.GET_KVLIST_BY_NAMESPACE, C.GET_TOPICS_BY_CLUSTER,
                C.QUERY_DATA_VERSION, C.BROKER_HEARTBEAT}
    assert set(processor.handlers) == expected
