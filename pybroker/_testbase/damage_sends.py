# The wire side of the damage property: acknowledged sends, offset commits, pulls of every queue.
"""Raw remoting requests (the Java client's codes and headers) for :mod:`pybroker._testbase.damage`:
one connection, SEND_MESSAGE_V2 with keys (so the index has entries), pulls that commit an
offset (so consumerOffset.json and subscriptionGroup.json exist), one delayed message (so
delayOffset.json does), and a reader that pulls every queue from offset 0 like a consumer,
stepping over PULL_OFFSET_MOVED answers.
"""
import random

from pybroker._fast import record as record_codec
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.message_id import decode_offset_message_id
from pybroker.remoting.client import SyncRemotingClient

__all__ = ["send_all", "commit_offsets", "pull_all"]

TIMEOUT_MS = 10_000
_GROUP = "damage_property"
_DELAY_TOPIC = "DamagePropertyDelayTopic"


def _send(client, topic: str, queues: int, queue_id: int, body: bytes,
          properties: dict[str, str]):
    ext = {"a": "damage_producer", "b": topic, "c": "TBW102", "d": str(queues),
           "e": str(queue_id), "f": "0", "g": "1700000000000", "h": "0",
           "i": props.encode_properties(properties), "j": "0", "k": "false", "m": "false"}
    response = client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, body),
                             TIMEOUT_MS)
    assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
    return response.ext_fields


def send_all(broker, topic: str, queues: int, count: int,
             rand: random.Random) -> list[tuple[int, int, bytes, int]]:
    """``count`` acknowledged sends of random sizes over ``queues`` queues: (queue id, queue
    offset, body, CommitLog offset) of each; plus one delayed message to another topic."""
    sent = []
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for index in range(count):
            queue_id = rand.randrange(queues)
            body = (b"m%06d-" % index) * rand.randrange(8, 160)
            fields = _send(client, topic, queues, queue_id, body,
                           {"WAIT": "true", "KEYS": f"key-{index}",
                            "UNIQ_KEY": f"AC1100010000{index:020X}", "TAGS": f"t{index % 3}"})
            _, _, physical_offset = decode_offset_message_id(fields["msgId"])
            sent.append((int(fields["queueId"]), int(fields["queueOffset"]), body,
                         physical_offset))
        _send(client, _DELAY_TOPIC, 1, 0, b"delayed", {"WAIT": "true", "DELAY": "1"})
    for queue_id in range(queues):
        broker.wait_max_offset(topic, queue_id,
                               1 + max((q for i, q, _, _ in sent if i == queue_id), default=-1))
    return sent


def _pull(client, topic: str, queue_id: int, queue_offset: int, commit_offset: int = -1):
    # sysFlag: SUBSCRIPTION (4), plus COMMIT_OFFSET (1) when an offset is committed.
    ext = {"consumerGroup": _GROUP, "topic": topic, "queueId": str(queue_id),
           "queueOffset": str(queue_offset), "maxMsgNums": "32",
           "sysFlag": "5" if commit_offset >= 0 else "4",
           "commitOffset": str(max(commit_offset, 0)), "suspendTimeoutMillis": "0",
           "subscription": "*", "subVersion": "0", "expressionType": "TAG"}
    return client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)


def commit_offsets(broker, topic: str, queues: int) -> None:
    """A pull that commits offset 1 on every queue (the group and offsets get persisted)."""
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for queue_id in range(queues):
            _pull(client, topic, queue_id, 1, commit_offset=1)


def _create_topic(client, broker, topic: str, queues: int) -> None:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
           "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
           "topicSysFlag": "0", "order": "false"}
    response = client.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext),
                             TIMEOUT_MS)
    assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)


def pull_all(broker, topic: str, queues: int) -> dict[tuple[int, int], bytes]:
    """{(queue id, queue offset): body} of every message served from offset 0 on."""
    served: dict[tuple[int, int], bytes] = {}
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for queue_id in range(queues):
            offset = 0
            for _ in range(100_000):
                response = _pull(client, topic, queue_id, offset)
                if response.code == ResponseCode.TOPIC_NOT_EXIST:
                    _create_topic(client, broker, topic, queues)
                    continue
                if response.code == ResponseCode.PULL_NOT_FOUND:
                    break
                assert response.code in (ResponseCode.SUCCESS, ResponseCode.PULL_OFFSET_MOVED,
                                         ResponseCode.PULL_RETRY_IMMEDIATELY), \
                    (response.code, response.remark)
                data, position = bytes(response.body or b""), 0
                while position < len(data):
                    status, size = record_codec.check(data, position, len(data), True)
                    assert status == record_codec.RECORD_OK, "a damaged record was served"
                    message = record_codec.decode(data, position)
                    served[(queue_id, message.queue_offset)] = bytes(message.body)
                    position += size
                next_offset = int(response.ext_fields["nextBeginOffset"])
                assert next_offset > offset, (response.code, next_offset, offset)
                offset = next_offset
    return served
