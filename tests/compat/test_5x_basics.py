"""The RocketMQ 5.x protocol basics answer as the Java 5.3.3 broker answers them.

Method: one Java 5.3.3 NameServer and broker and one ``pybroker standalone`` for the module.
The same raw requests go to both and the answers are compared: UPDATE_AND_CREATE_TOPIC with every
attribute case of tests/unit/broker/test_attributes.py (Java's answers recorded there),
GET_TOPIC_CONFIG (351), GET_SUBSCRIPTIONGROUP_CONFIG (352), group attributes, the message request
modes (401, 402), LITE_PULL_MESSAGE (361) and sends whose message type differs from the topic's
(the broker does not check it: the proxy does), and the answers about POP handles: ACK_MESSAGE,
BATCH_ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME with good and bad headers and handles (pybroker
takes a plain ACK_MESSAGE on its C frame-taker path, docs/architecture/pop.md, and leaves the rest
to its handler: both must answer as Java), and POP_MESSAGE's (refusals, tag filters, one queue and
every queue, limits, rest counts, offset infos). Then Java 5.3.3's mqadmin (updateTopic -a,
topicList, topicStatus, updateSubGroup -o, setConsumeMode) and ``pybroker admin`` run against both
brokers. Where pybroker answers otherwise on purpose (docs/compatibility.md, "5.x protocol basics")
the case is left out here and pinned by the unit tests. Remarks of exceptions Java did not catch
end with a stack frame; that frame is cut.
"""
import json
import re
import subprocess
import sys
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol import headers, pop
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient
from tests import peers
from tests.ha_support import records_of, wait_for
from tests.unit.broker.test_attributes import JAVA_ANSWERS

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(900)]

harness = peers.java_rocketmq
C = RequestCode
TIMEOUT_MS = 5000
# ", org.apache...Class.method(File.java:123)": the frame Java appends to an uncaught exception.
_FRAME = re.compile(r", [\w.$/]+\([\w.]+:\d+\)$")


class Peer:
    """A running broker: raw requests to it, and mqadmin 5.3.3 / pybroker admin at its
    NameServer."""

    def __init__(self, kind: str, namesrv_addr: str, broker_addr: str, rmq):
        self.kind, self.namesrv_addr, self.broker_addr, self.rmq = \
            kind, namesrv_addr, broker_addr, rmq
        self.client = SyncRemotingClient()
        self.client.connect(broker_addr, TIMEOUT_MS)

    def call(self, code: int, ext: dict | None = None, body: bytes | None = None):
        return self.client.invoke(create_request(code, dict(ext or {}), body), TIMEOUT_MS)

    def mqadmin(self, *args) -> str:
        run = self.rmq.run_class(harness.MQADMIN_CLASS, [*map(str, args), "-n",
                                                         self.namesrv_addr], timeout_s=90)
        return run.stdout + run.stderr

    def admin(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pybroker", "admin", *map(str, args),
                               "-n", self.namesrv_addr], capture_output=True, text=True,
                              timeout=120)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    install = peers.java_install("5.3.3")
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker")) as broker, \
            peers.java_broker(tmp_path_factory.mktemp("java"), install,
                              broker_heap_mb=384) as java:
        tools = harness.JavaRocketMQ(tmp_path_factory.mktemp("mqadmin"), install,
                                     namesrv_port=broker.namesrv_port)
        tools.write_files()
        peers_ = (Peer("pybroker", broker.namesrv_addr, broker.broker_addr, tools),
                  Peer("java", java.namesrv_addr, java.broker_addr, java))
        yield peers_
        for peer in peers_:
            peer.client.close()


def answer(response) -> tuple:
    """(code, remark, body) as compared: a success's remark is not (Java 5.x leaves
    "not set any response code" on some), an uncaught exception's frame is cut, a JSON body
    is compared as a document (Java prints maps in its hash order)."""
    remark = None if response.code == ResponseCode.SUCCESS else \
        _FRAME.sub("", response.remark or "")
    body = bytes(response.body or b"")
    return response.code, remark, json.loads(body) if body else None


def both(pair, code: int, ext: dict | None = None, body: bytes | None = None) -> tuple:
    ours, theirs = (answer(peer.call(code, ext, body)) for peer in pair)
    assert ours == theirs, (code, ext, body, ours, theirs)
    return ours


def create_topic(topic: str, attributes: str | None = None, queues: int = 4) -> dict:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
           "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
           "topicSysFlag": "0", "order": "false"}
    if attributes is not None:
        ext["attributes"] = attributes
    return ext


def test_topic_attributes_and_config_queries(pair):
    for number, (current, text, _) in enumerate(JAVA_ANSWERS):
        topic = f"Attr{number}"
        if current is not None:     # the topic exists with these attributes first
            setup = ",".join(f"+{key}={value}" for key, value in current.items())
            assert both(pair, C.UPDATE_AND_CREATE_TOPIC, create_topic(topic, setup))[0] == 0
        both(pair, C.UPDATE_AND_CREATE_TOPIC, create_topic(topic, text))
        both(pair, C.GET_TOPIC_CONFIG, {"topic": topic})
    both(pair, C.UPDATE_AND_CREATE_TOPIC, create_topic("AttrMixed", "+message.type=MIXED"))
    both(pair, C.UPDATE_AND_CREATE_TOPIC, create_topic("AttrFifo", "+message.type=FIFO"))
    both(pair, C.UPDATE_AND_CREATE_TOPIC, create_topic("AttrFifo"))      # kept without -a
    both(pair, C.GET_TOPIC_CONFIG, {"topic": "AttrFifo", "lo": "true"})
    both(pair, C.GET_TOPIC_CONFIG, {"topic": "NoSuchTopic"})
    assert both(pair, C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "Cg5x"})[0] == 0  # created
    both(pair, C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "bad group"})
    policy = {"type": "EXPONENTIAL",
              "exponentialRetryPolicy": {"initial": 1000, "max": 60000, "multiplier": 2}}
    group = {"groupName": "CgFifo", "consumeMessageOrderly": True, "groupRetryPolicy": policy}
    both(pair, C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, json.dumps(group).encode())
    both(pair, C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "CgFifo"})
    for attributes in ({"+foo": "1"}, {"foo": "1"}):
        body = json.dumps({"groupName": "CgAttr", "attributes": attributes}).encode()
        both(pair, C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body)
    both(pair, C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "CgAttr"})   # neither created it


def test_message_request_modes(pair):
    both(pair, C.UPDATE_AND_CREATE_TOPIC, create_topic("ModeTopic"))
    for body in ({"topic": "ModeTopic", "consumerGroup": "ModeA", "mode": "POP",
                  "popShareQueueNum": 2},
                 {"topic": "ModeTopic", "consumerGroup": "ModeB"},
                 {"topic": "ModeTopic", "consumerGroup": "ModeB", "mode": "PULL"},
                 {"topic": "NoSuchTopic", "consumerGroup": "ModeA", "mode": "POP"},
                 {"topic": "%RETRY%ModeA", "consumerGroup": "ModeA", "mode": "POP"}):
        both(pair, C.SET_MESSAGE_REQUEST_MODE, None, json.dumps(body).encode())
    both(pair, C.GET_ALL_MESSAGE_REQUEST_MODE)


def _send(peer, topic: str, body: bytes, **properties):
    text = props.encode_properties({"UNIQ_KEY": body.decode(), "WAIT": "true", **properties})
    ext = {"a": "p5x", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": "1700000000000", "h": "0", "i": text, "j": "0", "k": "false", "m": "false"}
    return peer.call(C.SEND_MESSAGE_V2, ext, body)


def _lite_pull(peer, topic: str, queue_offset: int, queue_id: int = 0, sys_flag: int = 0x14):
    ext = {"consumerGroup": "LiteGroup", "topic": topic, "queueId": str(queue_id),
           "queueOffset": str(queue_offset), "maxMsgNums": "32", "sysFlag": str(sys_flag),
           "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
           "subVersion": "0", "expressionType": "TAG"}
    return peer.call(C.LITE_PULL_MESSAGE, ext)


def _pull_answer(response) -> tuple:
    fields = {key: value for key, value in (response.ext_fields or {}).items()
              if key in ("nextBeginOffset", "minOffset", "maxOffset", "topicSysFlag",
                         "groupSysFlag", "forbiddenType", "suggestWhichBrokerId")}
    remark = _FRAME.sub("", response.remark or "").split("consumer:[")[0]
    bodies = [bytes(record.body) for record in records_of(response.body)]
    return response.code, remark, fields, bodies


def test_lite_pull_and_sends_of_another_type(pair):
    both(pair, C.UPDATE_AND_CREATE_TOPIC, create_topic("LiteFifo", "+message.type=FIFO"))
    both(pair, C.UPDATE_AND_CREATE_TOPIC, create_topic("LiteNormal", "+message.type=NORMAL"))
    for peer in pair:
        # The broker does not compare a message's type with the topic's (Java 5.3.3's proxy
        # does; its broker stores them): NORMAL to FIFO, FIFO and DELAY to NORMAL.
        for topic, body, properties in (("LiteFifo", b"normal", {}),
                                        ("LiteNormal", b"fifo", {"__SHARDINGKEY": "k"}),
                                        ("LiteNormal", b"delay", {"DELAY": "1"})):
            sent = _send(peer, topic, body, **properties)
            assert sent.code == ResponseCode.SUCCESS, (peer.kind, topic, sent.remark)
        wait_for(lambda peer=peer: _lite_pull(peer, "LiteFifo", 0).code ==
                 ResponseCode.SUCCESS, 20, f"{peer.kind} dispatch")
    cases = [("LiteFifo", 0, 0, 0x14), ("LiteFifo", 1, 0, 0x14), ("LiteFifo", 5, 0, 0x14),
             ("LiteFifo", 0, 9, 0x14), ("NoSuchTopic", 0, 0, 0x14)]
    for topic, queue_offset, queue_id, sys_flag in cases:
        ours, theirs = (_pull_answer(_lite_pull(peer, topic, queue_offset, queue_id, sys_flag))
                        for peer in pair)
        assert ours == theirs, (topic, queue_offset, queue_id, sys_flag, ours, theirs)


def test_mqadmin_5_and_pybroker_admin(pair):
    outputs = {}
    for peer in pair:
        text = peer.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", "AdminFifo", "-r", 2,
                            "-w", 2, "-a", "+message.type=FIFO")
        assert f"create topic to {peer.broker_addr} success." in text, text
        refused = peer.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", "AdminFifo",
                               "-a", "+queue.type=BatchCQ")
        assert "CODE: 1  DESC: attempt to update an unchangeable attribute. key: queue.type" \
            in refused, refused
        text = peer.mqadmin("updateSubGroup", "-c", "DefaultCluster", "-g", "AdminFifoGroup",
                            "-o", "true")
        assert f"create subscription group to {peer.broker_addr} success." in text, text
        text = peer.mqadmin("setConsumeMode", "-c", "DefaultCluster", "-t", "AdminFifo",
                            "-g", "AdminFifoGroup", "-m", "POP", "-q", 2)
        assert f"set consume mode to {peer.broker_addr} success." in text, text
        wait_for(lambda peer=peer: "AdminFifo" in peer.mqadmin("topicList").split(), 60,
                 f"{peer.kind} route of AdminFifo", interval_s=1)
        status = peer.mqadmin("topicStatus", "-t", "AdminFifo")
        queues = sorted(line.split()[1] for line in status.splitlines()
                        if line.split()[:1] == ["broker-a"])
        assert queues == ["0", "1"], status
        created = peer.admin("updateTopic", "-c", "DefaultCluster", "-t", "AdminDelay",
                             "-a", "+message.type=DELAY")
        assert created.returncode == 0, created.stderr
        moded = peer.admin("setConsumeMode", "-c", "DefaultCluster", "-t", "AdminDelay",
                           "-g", "AdminFifoGroup", "-m", "PULL")
        assert moded.returncode == 0, moded.stderr
        outputs[peer.kind] = (
            answer(peer.call(C.GET_TOPIC_CONFIG, {"topic": "AdminFifo"})),
            answer(peer.call(C.GET_TOPIC_CONFIG, {"topic": "AdminDelay"})),
            answer(peer.call(C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "AdminFifoGroup"})),
            json.loads(peer.call(C.GET_ALL_MESSAGE_REQUEST_MODE).body)
            ["messageRequestModeMap"]["AdminFifo"],
            peer.admin("getConsumeMode", "-c", "DefaultCluster", "-t", "AdminDelay",
                       "--json").stdout.replace(peer.broker_addr, "<broker>"))
    assert outputs["pybroker"] == outputs["java"]
    assert outputs["java"][0][2]["attributes"] == {"message.type": "FIFO"}
    assert outputs["java"][2][2]["consumeMessageOrderly"] is True


def _pop_handles(peer, topic: str, group: str) -> list[tuple[int, int, str]]:
    """(queue id, queue offset, receipt handle) of every message one POP of every queue
    returns, the handle built as Java's client builds it from the answer's header."""
    ext = headers.encode_header(headers.POP_MESSAGE_REQUEST, {
        "consumer_group": group, "topic": topic, "queue_id": -1, "max_msg_nums": 32,
        "invisible_time": 60000, "poll_time": 0, "born_time": int(time.time() * 1000),
        "init_mode": 0,
        "exp_type": "TAG", "exp": "*"})
    response = peer.call(C.POP_MESSAGE, ext)
    if response.code == ResponseCode.POLLING_TIMEOUT:           # not dispatched yet
        return []
    assert response.code == ResponseCode.SUCCESS, (peer.kind, response.code, response.remark)
    header = headers.POP_MESSAGE_RESPONSE.parse(response.ext_fields)
    starts = pop.parse_start_offset_info(header.start_offset_info)
    return [(record.queue_id, record.queue_offset, pop.build_extra_info(
        starts[f"0@{record.queue_id}"], header.pop_time, header.invisible_time,
        header.revive_qid, topic, "broker-a", record.queue_id, record.queue_offset))
        for record in records_of(response.body)]


def _handle_answer(response) -> tuple:
    """(code, remark): the consumer's address, which Java prints as its channel's, cut."""
    remark = None if response.code == ResponseCode.SUCCESS else \
        _FRAME.sub("", response.remark or "").split(" consumer:[")[0]
    return response.code, remark


def _handle_answers(peer, topic: str, group: str) -> list:
    """Three messages sent and popped, then the table of ACK / CHANGE / BATCH_ACK frames."""
    for number in range(3):
        sent = _send(peer, topic, f"h{number}".encode())
        assert sent.code == ResponseCode.SUCCESS, (peer.kind, sent.remark)
    handles: list = []
    wait_for(lambda: handles.extend(_pop_handles(peer, topic, group)) or len(handles) == 3,
             20, f"{peer.kind}: the three messages popped")
    handles.sort()
    (queue_id, offset, handle), (_, second_offset, second), (_, third_offset, third) = handles
    assert queue_id == 0 and [offset, second_offset, third_offset] == [0, 1, 2], handles

    def ack(extra_info=handle, queue_offset=offset, **fields):
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
               "extraInfo": extra_info, "offset": str(queue_offset), **fields}
        return _handle_answer(peer.call(C.ACK_MESSAGE, ext))

    def change(extra_info=second, queue_offset=second_offset, **fields):
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
               "extraInfo": extra_info, "offset": str(queue_offset), "invisibleTime": "30000",
               **fields}
        response = peer.call(C.CHANGE_MESSAGE_INVISIBLETIME, ext)
        return _handle_answer(response), sorted((response.ext_fields or {}).keys())

    parts = handle.split(" ")
    answers = [
        ack(),                                                  # the C path's case
        ack(),                                                  # again: still SUCCESS
        ack(topic="NoSuchPopTopic"),
        ack(queueId="7"),
        ack(queue_offset=100),
        ack(queue_offset=-1),
        ack(extra_info="not-a-handle"),
        ack(extra_info=" ".join(parts[:5])),                    # a field short
        ack(extra_info=" ".join([parts[0], "x", *parts[2:]])),  # pop time not a long
        ack(consumerGroup=group + "Other"),                     # another group's ack
        change(),
        change(topic="NoSuchPopTopic"),
        change(queueId="7"),
        change(queue_offset=100),
        change(invisibleTime="-1"),
        change(extra_info="not-a-handle"),
        change(extra_info=" ".join(parts[:5])),
        change(extra_info=" ".join([*parts[:3], "y", *parts[4:]])),  # reviveQid not an int
        _handle_answer(peer.call(C.BATCH_ACK_MESSAGE, None, b'{"acks":[]}')),
        _handle_answer(peer.call(C.BATCH_ACK_MESSAGE)),
    ]
    assert ack(extra_info=third, queue_offset=third_offset) == (ResponseCode.SUCCESS, None), \
        peer.kind
    return answers


def test_pop_handles_answered_as_java(pair):
    topic, group = "PopHandles", "PopHandlesGroup"
    both(pair, C.UPDATE_AND_CREATE_TOPIC, create_topic(topic, queues=2))
    ours, theirs = (_handle_answers(peer, topic, group) for peer in pair)
    assert ours == theirs


def _pop_answer(peer, **fields) -> tuple:
    """One POP_MESSAGE as compared: code, remark, the header's fields (popTime and reviveQid,
    which hold a clock reading and a random pick, as present or not; the offset infos as maps,
    since Java starts queueId -1 at a random queue) and the (queue, offset, body) of each
    message."""
    ext = {"consumerGroup": "PopAnswersGroup", "topic": "PopAnswers", "queueId": "-1",
           "maxMsgNums": "32", "invisibleTime": "60000", "pollTime": "0",
           "bornTime": str(int(time.time() * 1000)), "initMode": "0", "expType": "TAG",
           "exp": "*"}
    ext.update({key: str(value) for key, value in fields.items() if value is not None})
    for key in [key for key, value in fields.items() if value is None]:
        del ext[key]
    response = peer.call(C.POP_MESSAGE, ext)
    header = dict(response.ext_fields or {})
    for key in ("popTime", "reviveQid"):
        header[key] = key in header
    for key, parse in (("startOffsetInfo", pop.parse_start_offset_info),
                       ("msgOffsetInfo", pop.parse_msg_offset_info)):
        if header.get(key):
            header[key] = parse(header[key])
    remark = _FRAME.sub("", response.remark or "").split(" consumer:[")[0]
    messages = sorted((record.queue_id, record.queue_offset, bytes(record.body))
                      for record in records_of(response.body))
    return response.code, remark.replace(peer.broker_addr.split(":")[0], "<ip>"), header, \
        messages


def test_pop_answers_as_java(pair):
    both(pair, C.UPDATE_AND_CREATE_TOPIC, create_topic("PopAnswers", queues=2))
    for peer in pair:
        for number in range(6):
            text = props.encode_properties({"UNIQ_KEY": f"pa{number}", "WAIT": "true",
                                            "TAGS": "even" if number % 2 == 0 else "odd"})
            ext = {"a": "p5x", "b": "PopAnswers", "c": "TBW102", "d": "4",
                   "e": str(number % 2), "f": "0", "g": "1700000000000", "h": "0", "i": text,
                   "j": "0", "k": "false", "m": "false"}
            assert peer.call(C.SEND_MESSAGE_V2, ext, f"pa{number}".encode()).code == \
                ResponseCode.SUCCESS
        wait_for(lambda peer=peer: _pop_answer(peer, consumerGroup="PopPeek",
                                               invisibleTime=1)[3] != [],
                 20, f"{peer.kind} dispatch")
    old_born = int(time.time() * 1000) - 60000
    cases = [
        dict(maxMsgNums=33), dict(topic="NoSuchPopTopic"), dict(queueId=5),
        dict(exp="a = ", expType="SQL92"), dict(exp="x", expType="CLASS"),
        dict(bornTime=old_born, pollTime=1000),
        dict(consumerGroup="PopAnswersTags", exp="even"),            # a tag filter
        dict(consumerGroup="PopAnswersQueue", queueId=1, maxMsgNums=2),  # one queue, a limit
        dict(consumerGroup="PopAnswersQueue", queueId=1),            # the rest of queue 1
        dict(consumerGroup="PopAnswersQueue", queueId=1),            # nothing left
        dict(consumerGroup="PopAnswersAll"),                         # every queue
        dict(consumerGroup="PopAnswersAll"),                         # nothing left
        dict(consumerGroup="PopAnswersLast", initMode=1),            # from the queues' ends
    ]
    for fields in cases:
        ours, theirs = (_pop_answer(peer, **fields) for peer in pair)
        assert ours == theirs, (fields, ours, theirs)
