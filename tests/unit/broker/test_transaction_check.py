# Tests of the transaction check service over a real store and real metadata.
"""Goal: unfinished half messages older than the timeout are re-appended with the check counter
+ 1 and a oneway CHECK_TRANSACTION_STATE reaches a live producer channel of their group, finished
ones are skipped, and after transactionCheckMax checks a half message moves to
TRANS_CHECK_MAX_TIME_TOPIC. Method: half messages sent and ended through the real handlers into
a real MessageStore on tmp_path; the real MetadataState holds the producer channel (a list
recorder) and the CID_RMQ_SYS_TRANS offsets; run_once is driven with explicit times.
"""
import importlib.util
import pathlib

import pytest

from pybroker._fast import record as record_codec
from pybroker.broker import end_transaction, send, transaction_check
from pybroker.broker.managers.client_channel import make_channel_info
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import SystemGroup, SystemTopic
from pybroker.protocol.message_id import decode_offset_message_id
from pybroker.protocol.properties import decode_properties

_spec = importlib.util.spec_from_file_location(
    "send_harness", pathlib.Path(__file__).with_name("send_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
BORN = harness.BORN_MS


@pytest.fixture
def broker(tmp_path):
    created = harness.Broker(tmp_path, {"transactionCheckMax": "2"})
    created.metadata.producers.register_producer("PG", make_channel_info(created.channel, "c1", 0))
    yield created
    created.close()


def send_half(broker, uniq: str, **extra) -> tuple[int, int]:
    properties = harness.properties_text(TRAN_MSG="true", PGROUP="PG", UNIQ_KEY=uniq,
                                         WAIT="true", **extra)
    response = broker.call(send.handle_send_message, harness.send_request(
        "java", uniq.encode(), queue_id=1, sys_flag=4, properties=properties))
    assert response.code == ResponseCode.SUCCESS
    return (decode_offset_message_id(response.ext_fields["msgId"])[2],
            int(response.ext_fields["queueOffset"]))


def commit(broker, physical_offset: int, queue_offset: int) -> None:
    fields = {"producerGroup": "PG", "tranStateTableOffset": str(queue_offset),
              "commitLogOffset": str(physical_offset), "commitOrRollback": "8", "msgId": "x"}
    request = RemotingCommand(RequestCode.END_TRANSACTION, 0, 401, 1, 0, None, fields)
    assert broker.call(end_transaction.handle_end_transaction, request).code == 0


def checker(broker):
    return transaction_check.TransactionCheckService(broker.store, broker.putter,
                                                     broker.metadata, broker.config.broker)


def test_check_flow(broker):
    send_half(broker, "OPEN")
    commit(broker, *send_half(broker, "DONE"))
    service = checker(broker)
    assert harness.run(service.run_once(BORN + 1000)) == 0       # younger than 6 s
    assert broker.sent == []
    assert harness.run(service.run_once(BORN + 7000)) == 1
    [request] = broker.sent
    assert request.code == RequestCode.CHECK_TRANSACTION_STATE and request.is_oneway
    header = headers.parse_request_header(request.code, request.ext_fields)
    halves = broker.records(SystemTopic.TRANS_HALF, 0)
    renewed, renewed_properties = halves[-1]
    assert (header.commit_log_offset, header.transaction_state_table_offset) == (
        renewed.physical_offset, renewed.queue_offset) == (renewed.physical_offset, 2)
    assert header.msg_id == header.transaction_id == "OPEN"
    # Java 5.3.3's header: the checked record's own topic and the broker's name.
    assert (header.topic, header.broker_name) == (SystemTopic.TRANS_HALF,
                                                  broker.config.broker.broker_name)
    assert renewed_properties["TRANSACTION_CHECK_TIMES"] == "1"
    body = record_codec.decode(request.body, 0)
    assert (body.topic, body.queue_id, bytes(body.body)) == (harness.TOPIC, 1, b"OPEN")
    # As Java 4.9: the stored copy keeps WAIT, the producer sees the map with WAIT=false.
    assert renewed_properties["WAIT"] == "true"
    shown = decode_properties(body.properties)
    assert shown["WAIT"] == "false" and shown["TRANSACTION_CHECK_TIMES"] == "1"
    assert shown["REAL_TOPIC"] == harness.TOPIC and shown["TRAN_MSG"] == "true"
    metadata = broker.metadata
    assert metadata.offsets.query(SystemGroup.TRANS_CHECK, SystemTopic.TRANS_HALF, 0) == 2
    assert metadata.offsets.query(SystemGroup.TRANS_CHECK, SystemTopic.TRANS_OP_HALF, 0) == 1
    # The producer answers for the renewed record: the next pass finds it finished.
    commit(broker, header.commit_log_offset, header.transaction_state_table_offset)
    assert harness.run(service.run_once(BORN + 8000)) == 0
    assert metadata.offsets.query(SystemGroup.TRANS_CHECK, SystemTopic.TRANS_HALF, 0) == 3
    assert [bytes(r.body) for r, _ in broker.records(harness.TOPIC, 1)] == [b"DONE", b"OPEN"]


def test_too_many_checks_discard(broker):
    send_half(broker, "STUCK")
    service = checker(broker)
    assert harness.run(service.run_once(BORN + 7000)) == 1
    assert harness.run(service.run_once(BORN + 8000)) == 1
    assert harness.run(service.run_once(BORN + 9000)) == 0
    [(moved, properties)] = broker.records(SystemTopic.TRANS_CHECK_MAX_TIME, 0)
    assert bytes(moved.body) == b"STUCK" and properties["TRANSACTION_CHECK_TIMES"] == "2"
    assert len(broker.sent) == 2


def test_no_live_producer_still_counts_the_check(broker):
    broker.metadata.producers.unregister_producer("PG", broker.channel.channel_id)
    send_half(broker, "ALONE")
    assert harness.run(checker(broker).run_once(BORN + 7000)) == 1
    assert broker.sent == []


def test_immune_half_is_put_back_and_the_walk_goes_on(broker):
    first_offset = send_half(broker, "IMMUNE", CHECK_IMMUNITY_TIME_IN_SECONDS="60")[1]
    send_half(broker, "PLAIN")
    service = checker(broker)
    # 7 s: PLAIN is checked; IMMUNE (60 s) is put back carrying its first offset (Java's
    # checkPrepareQueueOffset) instead of stopping the walk.
    assert harness.run(service.run_once(BORN + 7000)) == 1
    assert [bytes(r.body) for r, _ in broker.records(SystemTopic.TRANS_HALF, 0)] == [
        b"IMMUNE", b"PLAIN", b"IMMUNE", b"PLAIN"]
    [_, _, (_, immune), _] = broker.records(SystemTopic.TRANS_HALF, 0)
    assert immune["TRAN_PREPARED_QUEUE_OFFSET"] == str(first_offset)
    assert immune["TRANSACTION_CHECK_TIMES"] == "1" and immune["WAIT"] == "false"
    assert len(broker.sent) == 1
    commit(broker, broker.records(SystemTopic.TRANS_HALF, 0)[0][0].physical_offset, first_offset)
    # Next pass, as in Java 4.9: the copy is put back again while immune (the op marker of a
    # first offset behind the walk only counts as done), PLAIN's unanswered copy is checked.
    assert harness.run(service.run_once(BORN + 8000)) == 1
    assert [bytes(r.body) for r, _ in broker.records(SystemTopic.TRANS_HALF, 0)][4:] == [
        b"IMMUNE", b"PLAIN"]
    assert broker.metadata.offsets.query(SystemGroup.TRANS_CHECK, SystemTopic.TRANS_HALF, 0) == 4
    # Put-backs count as checks (Java's needDiscard runs first): at transactionCheckMax=2
    # both copies are discarded on the next pass.
    assert harness.run(service.run_once(BORN + 61_000)) == 0
    assert sorted(bytes(r.body) for r, _ in broker.records(
        SystemTopic.TRANS_CHECK_MAX_TIME, 0)) == [b"IMMUNE", b"PLAIN"]


def test_op_marker_bodies():
    assert transaction_check.op_marker_offsets(b"17") == [17]
    assert transaction_check.op_marker_offsets(b"3,4,") == [3, 4]
    assert transaction_check.op_marker_offsets(b"junk,-1") == []
