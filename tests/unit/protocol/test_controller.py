"""Controller-mode wire formats: the AutoSwitchHA frames and the controller bodies and headers.

Method: frames are built and parsed back, offsets checked against the layout of Java 5.3.3's
design document (docs/en/controller/design.md) and AutoSwitchHAConnection/Client; every parser is
fed truncated, foreign and hostile input (an HTTP greeting, negative offsets, oversized bodies)
and must refuse or wait, never crash; JSON bodies are decoded from text in the shape fastjson
writes (including bare keys) and encoded with Java's key order.
"""
import pytest

from pybroker.protocol import autoswitch_ha as wire
from pybroker.protocol import controller
from pybroker.protocol.ha import HAProtocolError
from pybroker.protocol import headers
from pybroker.protocol.headers import encode_header
from pybroker.store.epoch_file import EpochEntry


def test_slave_frames_round_trip_and_split():
    data = wire.encode_slave_handshake(7, True, False) + wire.encode_report(4096) \
        + wire.encode_report(8192)
    assert data[:4] == b"\x00\x00\x00\x01" and data[16:20] == b"\x00\x00\x00\x02"
    frames, consumed = wire.parse_slave_frames(data, len(data))
    assert frames == [("handshake", 7, True, False), ("report", 4096), ("report", 8192)]
    assert consumed == len(data)
    for cut in range(len(data)):
        frames, consumed = wire.parse_slave_frames(data, cut)
        assert consumed <= cut
        assert len(frames) == sum(1 for end in (16, 28, 40) if end <= cut)


@pytest.mark.parametrize("garbage", [b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x02\x00\x01",
                                     wire.SLAVE_REPORT.pack(2, -5)])
def test_slave_garbage_refused(garbage):
    with pytest.raises(HAProtocolError):
        wire.parse_slave_frames(garbage, len(garbage))


def test_master_handshake_and_transfer():
    handshake = wire.encode_master_handshake(1000, 3, [(1, 0), (3, 500)])
    assert len(handshake) == 20 + 24
    header = wire.parse_master_header(handshake, 0, len(handshake))
    assert header == (wire.ConnectionState.HANDSHAKE, 24, 1000, 3, 0, 0, 20)
    assert wire.parse_epoch_entries(handshake[20:]) == [(1, 0), (3, 500)]
    transfer = wire.encode_transfer_header(4096, 10, 3, 500, 4000) + b"x" * 10
    assert wire.parse_master_header(transfer, 0, 35) is None          # 36-byte header
    assert wire.parse_master_header(transfer, 0, len(transfer)) == \
        (wire.ConnectionState.TRANSFER, 10, 4096, 3, 500, 4000, 36)
    assert wire.parse_master_header(transfer, 0, 19) is None


@pytest.mark.parametrize("frame", [
    wire.MASTER_HANDSHAKE.pack(1, 13, 0, 1),                          # not whole entries
    wire.MASTER_HANDSHAKE.pack(1, 12 * 1001, 0, 1),                   # above Java's 1000
    wire.MASTER_TRANSFER.pack(2, wire.TRANSFER_BODY_MAX_BYTES + 1, 0, 1, 0, 0),
    wire.MASTER_TRANSFER.pack(2, 5, -1, 1, 0, 0),
    b"HTTP/1.1 400 Bad Request\r\n\r\n..........",
])
def test_master_garbage_refused(frame):
    with pytest.raises(HAProtocolError):
        wire.parse_master_header(frame, 0, len(frame))


def test_sync_state_set_body():
    data = controller.encode_sync_state_set({2, 1}, 4)
    assert data == b'{"syncStateSet":[1,2],"syncStateSetEpoch":4}'
    assert controller.decode_sync_state_set(data) == controller.SyncStateSet(frozenset({1, 2}), 4)
    assert controller.decode_sync_state_set(b"{}") == controller.SyncStateSet(frozenset(), 0)
    with pytest.raises(ValueError):
        controller.decode_sync_state_set(b'{"syncStateSet":["x"]}')


def test_elect_master_body_with_bare_keys():
    text = (b'{"brokerMemberGroup":{"brokerAddrs":{1:"127.0.0.1:40911",2:"127.0.0.1:40921"},'
            b'"brokerName":"broker-a","cluster":"DefaultCluster"},"syncStateSet":[2]}')
    body = controller.decode_elect_master_body(text)
    assert body.sync_state_set == {2}
    assert body.broker_addrs == {1: "127.0.0.1:40911", 2: "127.0.0.1:40921"}


def test_epoch_entry_cache_and_replicas_info():
    data = controller.encode_epoch_entry_cache("C", "b", 1, [EpochEntry(1, 0, 100),
                                                            EpochEntry(2, 100)], 150)
    assert data.startswith(b'{"brokerId":1,"brokerName":"b","clusterName":"C","epochList":[')
    decoded = controller.decode_epoch_entry_cache(data)
    assert decoded["entries"][0] == (1, 0, 100) and decoded["max_offset"] == 150
    replica = controller.ReplicaIdentity("b", 1, "127.0.0.1:1", True)
    info = controller.ReplicasInfo(1, "127.0.0.1:1", 2, 3, (replica,), ())
    table = controller.decode_broker_replicas_info(
        controller.encode_broker_replicas_info({"b": info}))
    assert table == {"b": info}
    assert str(replica) == ("ReplicaIdentity{brokerName='b', brokerId=1, "
                            "brokerAddress='127.0.0.1:1', alive=true}")
    assert controller.decode_broker_names(controller.encode_broker_names(["b"])) == ["b"]


def test_headers_encode_java_names():
    ext = encode_header(headers.ALTER_SYNC_STATE_SET_REQUEST,
                        {"broker_name": "b", "master_broker_id": 1, "master_epoch": 2,
                         "invoke_time": 5})
    assert ext == {"brokerName": "b", "masterBrokerId": "1", "masterEpoch": "2",
                   "invokeTime": "5"}
    parsed = headers.NOTIFY_BROKER_ROLE_CHANGED_REQUEST.parse(
        {"masterAddress": "127.0.0.1:1", "masterEpoch": "3", "syncStateSetEpoch": "4",
         "masterBrokerId": "2"})
    assert (parsed.master_broker_id, parsed.master_epoch) == (2, 3)
    meta = headers.GET_METADATA_RESPONSE.parse({"isLeader": "true", "peers": "n0-a:1"})
    assert meta.is_leader and meta.controller_leader_address is None
