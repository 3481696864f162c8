# Tests of the END_TRANSACTION handler over a real store.
"""Goal: commit rebuilds the final message from the half record and writes the op marker,
rollback writes only the marker, unknown does nothing, and every mismatch is refused with Java's
remark and stores nothing. Method: half messages sent through the real send handler (Java-style
PREPARED sends), END_TRANSACTION requests built like the Java client's (long names, offsets from
the send response) against a real MessageStore on tmp_path; records are decoded and compared.
"""
import importlib.util
import pathlib

import pytest

from pybroker.broker import end_transaction, send
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import RPC_ONEWAY, SystemTopic
from pybroker.protocol.message_id import decode_offset_message_id

_spec = importlib.util.spec_from_file_location(
    "send_harness", pathlib.Path(__file__).with_name("send_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
handle = end_transaction.handle_end_transaction


@pytest.fixture
def broker(tmp_path):
    created = harness.Broker(tmp_path)
    yield created
    created.close()


def send_half(broker, **extra_properties) -> tuple[int, int]:
    """(physical offset, half queue offset) of a new half message."""
    properties = harness.properties_text(TRAN_MSG="true", PGROUP="PG", UNIQ_KEY="U1",
                                         TAGS="tx", **extra_properties)
    response = broker.call(send.handle_send_message, harness.send_request(
        "java", b"half-body", queue_id=2, sys_flag=4, properties=properties))
    assert response.code == ResponseCode.SUCCESS
    return (decode_offset_message_id(response.ext_fields["msgId"])[2],
            int(response.ext_fields["queueOffset"]))


def end_request(physical_offset, queue_offset, decision, group="PG", oneway=False):
    fields = {"producerGroup": group, "tranStateTableOffset": str(queue_offset),
              "commitLogOffset": str(physical_offset), "commitOrRollback": str(decision),
              "fromTransactionCheck": "false", "msgId": "U1", "transactionId": "U1"}
    return RemotingCommand(RequestCode.END_TRANSACTION, 0, 401, 9,
                           RPC_ONEWAY if oneway else 0, None, fields)


def op_markers(broker) -> list[bytes]:
    return [bytes(r.body) for r, _ in broker.records(SystemTopic.TRANS_OP_HALF, 0)]


def test_commit_rebuilds_the_final_message(broker):
    send_half(broker)
    physical_offset, queue_offset = send_half(broker)
    [_, (half, _)] = broker.records(SystemTopic.TRANS_HALF, 0)
    response = broker.call(handle, end_request(physical_offset, queue_offset, 8))
    assert response.code == ResponseCode.SUCCESS
    [(final, properties)] = broker.records(harness.TOPIC, 2)
    assert bytes(final.body) == b"half-body" and final.sys_flag & 0xC == 8
    assert final.prepared_transaction_offset == physical_offset
    # Java 4.9 stores the half record's properties unchanged (tests/compat/
    # test_property_fidelity.py compares with the Java broker).
    assert properties["REAL_TOPIC"] == harness.TOPIC and properties["REAL_QID"] == "2"
    assert properties["TRAN_MSG"] == "true" and properties["PGROUP"] == "PG"
    assert final.born_timestamp == half.born_timestamp
    assert op_markers(broker) == [b"1"]
    [(marker, marker_properties)] = broker.records(SystemTopic.TRANS_OP_HALF, 0)
    assert marker_properties["TAGS"] == "d"


def test_commit_of_a_delayed_half_goes_to_the_schedule_topic(broker):
    physical_offset, queue_offset = send_half(broker, DELAY="2")
    broker.call(handle, end_request(physical_offset, queue_offset, 8))
    [(_, properties)] = broker.records(SystemTopic.SCHEDULE, 1)
    assert properties["REAL_TOPIC"] == harness.TOPIC and properties["REAL_QID"] == "2"
    # The redirect recomputes the string from Java's map, where TRAN_MSG was cleared.
    assert "TRAN_MSG" not in properties and properties["DELAY"] == "2"


def test_rollback_writes_only_the_marker(broker):
    physical_offset, queue_offset = send_half(broker)
    response = broker.call(handle, end_request(physical_offset, queue_offset, 12))
    assert response.code == ResponseCode.SUCCESS
    assert broker.records(harness.TOPIC, 2) == [] and op_markers(broker) == [b"0"]


def test_unknown_and_oneway_answer_nothing(broker):
    physical_offset, queue_offset = send_half(broker)
    end = broker.commitlog_end()
    assert broker.call(handle, end_request(physical_offset, queue_offset, 0)) is None
    assert broker.commitlog_end() == end
    assert broker.call(handle, end_request(physical_offset, queue_offset, 12,
                                           oneway=True)) is None
    assert op_markers(broker) == [b"0"]


@pytest.mark.parametrize("case,remark", [
    ("group", "The producer group wrong"),
    ("queue-offset", "The transaction state table offset wrong"),
    ("offset", "Find prepared transaction message failed"),
    ("not-half", "Find prepared transaction message failed"),
    ("decision", "is not 0, 8 or 12"),
])
def test_mismatches_are_refused(broker, case, remark):
    physical_offset, queue_offset = send_half(broker)
    broker.call(send.handle_send_message, harness.send_request("java", b"plain"))
    plain_offset = broker.records(harness.TOPIC, 0)[0][0].physical_offset
    end = broker.commitlog_end()
    request = {"group": end_request(physical_offset, queue_offset, 8, group="Other"),
               "queue-offset": end_request(physical_offset, queue_offset + 1, 8),
               "offset": end_request(end + 64, queue_offset, 8),
               "not-half": end_request(plain_offset, 0, 8),
               "decision": end_request(physical_offset, queue_offset, 4)}[case]
    response = broker.call(handle, request)
    assert response.code == ResponseCode.SYSTEM_ERROR and remark in response.remark
    assert broker.commitlog_end() == end


def test_slave_answers_slave_not_available(tmp_path):
    broker = harness.Broker(tmp_path, {"brokerRole": "SLAVE", "brokerId": "1"})
    try:
        response = broker.call(handle, end_request(0, 0, 8))
        assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE
    finally:
        broker.close()
