"""A real `pybroker standalone` process answers the RocketMQ protocol end to end.

Method: start the broker (NameServer + supervisor + workers) as a subprocess on free 127.0.0.1
ports with its store in tmp_path, talk to it over real sockets with pybroker's remoting client
as a Java client would (SEND_MESSAGE_V2, HEART_BEAT, PULL_MESSAGE, offsets, route lookups), and
check every reply field; then kill -9 the whole broker and check that every acknowledged
message is still there after restart.
"""
import orjson
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker._testbase.raw_client import pull, records_of
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient

pytestmark = [pytest.mark.slow]
TIMEOUT_MS = 10_000


def _send(client, topic, body: bytes, queue_id=-1, tags="TagA", keys="k1"):
    properties = props.encode_properties({"TAGS": tags, "KEYS": keys, "WAIT": "true",
                                          "UNIQ_KEY": "AC11000100002A9F0000000000000001"})
    ext = {"a": "test_producer_group", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id),
           "f": "0", "g": "1700000000000", "h": "0", "i": properties, "j": "0", "k": "false",
           "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, body), TIMEOUT_MS)


@pytest.fixture
def broker(tmp_path):
    with StandaloneBroker(tmp_path) as running:
        yield running


def test_route_send_and_pull_round_trip(broker):
    with SyncRemotingClient() as namesrv:
        namesrv.connect(broker.namesrv_addr)
        route = namesrv.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              {"topic": "TBW102"}), TIMEOUT_MS)
        assert route.code == ResponseCode.SUCCESS, route.remark
        assert broker.broker_addr in bytes(route.body).decode()
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        sent = []
        for index in range(20):
            response = _send(client, "RoundTrip", b"body-%d" % index, queue_id=index % 2)
            assert response.code == ResponseCode.SUCCESS, response.remark
            for key in ("msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"):
                assert key in response.ext_fields
            sent.append((int(response.ext_fields["queueId"]),
                         int(response.ext_fields["queueOffset"]), b"body-%d" % index))
        assert sorted(offset for queue, offset, _ in sent if queue == 0) == list(range(10))
        received = {}
        for queue_id in (0, 1):
            broker.wait_max_offset("RoundTrip", queue_id, 10)   # dispatched, then pulled
            response = pull(client, "RoundTrip", queue_id, 0, group="g1")
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert int(response.ext_fields["nextBeginOffset"]) == 10
            assert int(response.ext_fields["maxOffset"]) == 10
            for message in records_of(response.body):
                received[(message.queue_id, message.queue_offset)] = bytes(message.body)
        assert received == {(queue, offset): body for queue, offset, body in sent}
        empty = pull(client, "RoundTrip", 0, 10, group="g1")
        assert empty.code == ResponseCode.PULL_NOT_FOUND


def test_heartbeat_then_offsets_go_through_the_metadata_service(broker):
    heartbeat = {"clientID": "127.0.0.1@test", "producerDataSet": [],
                 "consumerDataSet": [{"groupName": "cg", "consumeType": "CONSUME_PASSIVELY",
                                      "messageModel": "CLUSTERING",
                                      "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                      "unitMode": False,
                                      "subscriptionDataSet": [{"topic": "OffsetTopic",
                                                               "subString": "*",
                                                               "expressionType": "TAG",
                                                               "classFilterMode": False,
                                                               "tagsSet": [], "codeSet": [],
                                                               "subVersion": 1}]}]}
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        assert _send(client, "OffsetTopic", b"x", queue_id=0).code == ResponseCode.SUCCESS
        answer = client.invoke(create_request(RequestCode.HEART_BEAT, None,
                                              orjson.dumps(heartbeat)), TIMEOUT_MS)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        members = client.invoke(create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                               {"consumerGroup": "cg"}), TIMEOUT_MS)
        assert orjson.loads(members.body)["consumerIdList"] == ["127.0.0.1@test"]
        update = create_request(RequestCode.UPDATE_CONSUMER_OFFSET,
                                {"consumerGroup": "cg", "topic": "OffsetTopic", "queueId": "0",
                                 "commitOffset": "1"})
        assert client.invoke(update, TIMEOUT_MS).code == ResponseCode.SUCCESS
        query = client.invoke(create_request(RequestCode.QUERY_CONSUMER_OFFSET,
                                             {"consumerGroup": "cg", "topic": "OffsetTopic",
                                              "queueId": "0"}), TIMEOUT_MS)
        assert query.code == ResponseCode.SUCCESS and query.ext_fields["offset"] == "1"
        unknown = client.invoke(create_request(9999), TIMEOUT_MS)
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_kill_minus_9_loses_no_acknowledged_message(tmp_path):
    broker = StandaloneBroker(tmp_path, {"flushDiskType": "SYNC_FLUSH"})
    acked = []
    with broker:
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            for index in range(200):
                response = _send(client, "CrashTopic", b"m-%d" % index, queue_id=0)
                assert response.code == ResponseCode.SUCCESS, response.remark
                acked.append(int(response.ext_fields["queueOffset"]))
        broker.kill()
        broker.start()
        broker.wait_max_offset("CrashTopic", 0, len(acked))
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            seen = []
            while len(seen) < len(acked):
                response = pull(client, "CrashTopic", 0, len(seen), group="g")
                assert response.code == ResponseCode.SUCCESS, response.remark
                seen += [bytes(m.body) for m in records_of(response.body)]
    assert seen == [b"m-%d" % index for index in range(200)]
    assert acked == list(range(200))
    assert "recovered (abnormal)" in broker._log_text()


def test_sigterm_stops_cleanly_and_restart_recovers_normally(tmp_path):
    broker = StandaloneBroker(tmp_path)
    with broker:
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            for index in range(50):
                assert _send(client, "CleanTopic", b"c-%d" % index, queue_id=0).code == 0
        assert broker.stop() == 0
        assert not (tmp_path / "store" / "abort").exists()
        log_before_restart = len(broker._log_text())
        broker.start()
        assert "recovered (normal)" in broker._log_text()[log_before_restart:]
        broker.wait_max_offset("CleanTopic", 0, 50)
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            response = pull(client, "CleanTopic", 0, 0, group="g", max_nums=64)
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert [bytes(m.body) for m in records_of(response.body)] == \
                [b"c-%d" % index for index in range(32)]
            assert int(response.ext_fields["maxOffset"]) == 50


def test_second_broker_on_the_same_store_is_refused(tmp_path):
    with StandaloneBroker(tmp_path / "first") as first:
        second = StandaloneBroker(tmp_path / "second", {"storePathRootDir": first.store_dir})
        with pytest.raises(RuntimeError, match="exited with 1"):
            second.start()
        assert "cannot start" in second._log_text()
        with SyncRemotingClient() as client:
            client.connect(first.broker_addr)
            assert _send(client, "StillServing", b"ok", queue_id=0).code == ResponseCode.SUCCESS
