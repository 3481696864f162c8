# SendMessage, EndTransaction, RecallMessage: the proxy's producer activities on our handlers.
"""Producer RPCs, answered as the Java 5.3.3 proxy answers them, stored by pybroker's own
send path.

A send is checked as the proxy checks it (pybroker/grpc_service/messages.py), its queue picked
as the proxy picks it (a message group hashes to one write queue with Guava's consistentHash
of the group's Java hashCode; other sends go round the write queues), and then it is the
remoting worker's SEND_MESSAGE: the same handler (pybroker/broker/send.py), the same encode
into this worker's send ring, the same appender, the same durability rule for SEND_OK. No
hand-off is added: the gRPC worker owns a send ring like a remoting worker. The handler's
answer becomes the proxy's: SEND_OK, FLUSH_DISK_TIMEOUT (MASTER_PERSISTENCE_TIMEOUT),
FLUSH_SLAVE_TIMEOUT (SLAVE_PERSISTENCE_TIMEOUT) and SLAVE_NOT_AVAILABLE (HA_NOT_AVAILABLE) as
result entries, any other code as the whole response's status (status.py's table).

Transactions: a stored half message's transaction id is its message id (UNIQ_KEY, as Java 5.x
answers it); its offsets are kept here (the proxy's TransactionService) for EndTransaction,
which is the remoting END_TRANSACTION run locally, oneway as the proxy sends it.
"""
import collections
import dataclasses
import itertools
import time

from pybroker._fast.jhash import java_hash
from pybroker.broker import end_transaction, send
from pybroker.broker.attributes import TopicMessageType
from pybroker.broker.channel import Channel
from pybroker.client.message import Message as BatchEntry
from pybroker.client.message import encode_batch
from pybroker.grpc_service import checks, messages, route
from pybroker.grpc_service.status import (OK_STATUS, Code, GrpcRefused, proxy_exception, status,
                                          status_of_remoting)
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import (DLQ_GROUP_TOPIC_PREFIX, END_TRANSACTION_COMMIT,
                                         END_TRANSACTION_ROLLBACK, END_TRANSACTION_UNKNOWN,
                                         RETRY_GROUP_TOPIC_PREFIX, Perm, Property)
from pybroker.protocol.message_id import decode_offset_message_id
from pybroker.protocol.properties import encode_properties
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb

TRANSACTION_DATA_MAX = 65536            # half messages one worker remembers
TRANSACTION_DATA_TTL_MS = 3600 * 1000   # longest a half message waits for its end here
# Send answers that are result entries, with the proxy's codes; others fail the RPC.
_ENTRY_CODES = {ResponseCode.FLUSH_DISK_TIMEOUT: (Code.MASTER_PERSISTENCE_TIMEOUT,
                                                  "FLUSH_DISK_TIMEOUT"),
                ResponseCode.FLUSH_SLAVE_TIMEOUT: (Code.SLAVE_PERSISTENCE_TIMEOUT,
                                                   "FLUSH_SLAVE_TIMEOUT"),
                ResponseCode.SLAVE_NOT_AVAILABLE: (Code.HA_NOT_AVAILABLE, "SLAVE_NOT_AVAILABLE")}
_LCG_MULTIPLIER = 2862933555777941757
_MASK64 = (1 << 64) - 1


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's Hashing.consistentHash(long, int): the bucket of ``key`` in [0, buckets)."""
    state = key & _MASK64
    candidate = 0
    while True:
        state = (_LCG_MULTIPLIER * state + 1) & _MASK64
        shifted = (state >> 33) & 0x7FFFFFFF
        next_candidate = int((candidate + 1) / ((shifted + 1) / float(1 << 31)))
        if 0 <= next_candidate < buckets:
            candidate = next_candidate
        else:
            return candidate


@dataclasses.dataclass(frozen=True)
class HalfMessage:
    """Where a half message is: what END_TRANSACTION must name."""
    commit_log_offset: int
    queue_offset: int
    expires_ms: int


class TransactionData:
    """(producer group, transaction id) -> HalfMessage, bounded in count and age."""

    def __init__(self):
        self._table: collections.OrderedDict[tuple[str, str], HalfMessage] = \
            collections.OrderedDict()

    def add(self, group: str, transaction_id: str, commit_log_offset: int,
            queue_offset: int, now_ms: int) -> None:
        key = (group, transaction_id)
        self._table.pop(key, None)
        self._table[key] = HalfMessage(commit_log_offset, queue_offset,
                                       now_ms + TRANSACTION_DATA_TTL_MS)
        while len(self._table) > TRANSACTION_DATA_MAX:
            self._table.popitem(last=False)

    def take(self, group: str, transaction_id: str, now_ms: int) -> HalfMessage | None:
        found = self._table.pop((group, transaction_id), None)
        if found is None or found.expires_ms < now_ms:
            return None
        return found


def writable_queues(topic_config, perm: int) -> int:
    """How many write queues a send may pick from (none without write permission)."""
    return topic_config.write_queue_nums if perm & Perm.WRITE else 0


class QueueSelector:
    """SendMessageQueueSelector over this broker's write queues of a topic (the C++ front's
    fast sends go round with turns of their own, _fast/grpc_front/send.h QueueTurns)."""

    def __init__(self):
        self._turns: dict[str, itertools.count] = {}

    def select(self, topic: str, topic_config, perm: int, message_group: str | None) -> int:
        writes = writable_queues(topic_config, perm)
        if writes <= 0:
            raise proxy_exception(Code.FORBIDDEN, "no writable queue")
        if message_group:
            return consistent_hash(java_hash(message_group), writes)
        if topic not in self._turns:
            if len(self._turns) >= 65536:
                self._turns.clear()
            self._turns[topic] = itertools.count()
        return next(self._turns[topic]) % writes


def check_message_type(host, topic: str, topic_config, actual: str) -> None:
    """TopicMessageTypeValidator of a message of type ``actual`` (retry and DLQ topics are not
    checked)."""
    if not host.ctx.config.grpc.enable_topic_message_type_check:
        return
    if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        return
    expected = route.topic_message_type(topic_config)
    if actual != expected and expected != TopicMessageType.MIXED:
        raise proxy_exception(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                              f"TopicMessageType validate failed, the expected type is "
                              f"{expected}, but actual type is {actual}")


def _send_request(topic: str, queue_id: int, outgoing: list, sys_flag: int):
    first = outgoing[0]
    try:
        born_timestamp = int(first.properties.get(Property.BORN_TIMESTAMP, ""))
    except ValueError:
        born_timestamp = int(time.time() * 1000)
    values = {"producer_group": topic, "topic": topic, "default_topic": "TBW102",
              "default_topic_queue_nums": 4, "queue_id": queue_id, "sys_flag": sys_flag,
              "born_timestamp": born_timestamp, "flag": 0, "reconsume_times": 0}
    if len(outgoing) == 1:
        values["properties"] = encode_properties(first.properties)
        body = first.body
        code = RequestCode.SEND_MESSAGE
    else:
        values["batch"] = True
        entries = []
        for message in outgoing:
            entry = BatchEntry(topic, message.body)
            entry.properties = dict(message.properties)
            entries.append(entry)
        body = encode_batch(entries)
        code = RequestCode.SEND_BATCH_MESSAGE
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        reconsume = first.properties.pop(Property.RECONSUME_TIME, None)
        if reconsume is not None and reconsume.isdigit():
            values["reconsume_times"] = int(reconsume)
            values["properties"] = encode_properties(first.properties)
    fields = headers.encode_header(headers.SEND_MESSAGE_REQUEST, values)
    return create_request(code, fields, body)


def _entry(answer, outgoing: list, prepared: bool) -> spb.SendResultEntry:
    code = answer.code
    if code == ResponseCode.SUCCESS:
        message_id = ",".join(message.properties[Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
                              for message in outgoing)
        fields = answer.ext_fields or {}
        return spb.SendResultEntry(
            status=OK_STATUS, message_id=message_id,
            transaction_id=message_id if prepared else "",
            offset=int(fields.get("queueOffset", "0")),
            recall_handle=fields.get("recallHandle", ""))
    return spb.SendResultEntry(status=entry_status(code))


def entry_status(remoting_code: ResponseCode) -> pb.Status:
    """The result entry's status of a send answered with one of the entry codes."""
    entry_code, name = _ENTRY_CODES[remoting_code]
    return status(entry_code, f"send message failed, sendStatus={name}")


def entry_codes() -> dict[int, tuple[int, str]]:
    """remoting code -> (gRPC code, message) of the send answers that are a result entry
    (the C++ front answers them as :func:`_entry` does)."""
    return {int(code): (answer.code, answer.message)
            for code, answer in ((code, entry_status(code)) for code in _ENTRY_CODES)}


def refused_answer(remoting_code: int, remark: str | None) -> spb.SendMessageResponse:
    """The answer to a send the handler answered with any other code than SUCCESS and the entry
    codes: the proxy's status of the refusal."""
    return spb.SendMessageResponse(status=status_of_remoting(remoting_code, remark))


async def send_message(host, rctx, request: spb.SendMessageRequest) -> spb.SendMessageResponse:
    if not request.messages:
        raise GrpcRefused(Code.MESSAGE_CORRUPTED, "no message to send")
    topic = request.messages[0].topic.name
    checks.validate_topic(topic)
    config = host.ctx.config
    outgoing = []
    for message in request.messages:
        if message.topic != request.messages[0].topic:
            raise GrpcRefused(Code.MESSAGE_CORRUPTED, "topic in message is not same")
        outgoing.append(messages.outgoing(message, topic, rctx.remote_address, config.grpc,
                                          config.store.max_message_size))
    topic_config = host.ctx.metadata.topic_config(topic)
    check_message_type(host, topic, topic_config,
                       messages.message_type_of_properties(outgoing[0].properties))
    if topic_config is None:
        raise route.not_found(topic)
    group = outgoing[0].message_group if len(outgoing) == 1 else None
    queue_id = host.queue_selector.select(topic, topic_config,
                                          route.topic_perm(host, topic_config), group)
    sys_flag = messages.sys_flag_of(request.messages[0])
    remoting = _send_request(topic, queue_id, outgoing, sys_flag)
    channel = Channel(host.channel_id(rctx), rctx.remote_address, rctx.language, rctx.version)
    answer = await send.handle_send_message(host.ctx, channel, remoting)
    assert answer is not None           # not oneway
    if answer.code != ResponseCode.SUCCESS and answer.code not in _ENTRY_CODES:
        return refused_answer(answer.code, answer.remark)
    prepared = bool(sys_flag & messages.PREPARED_SYS_FLAG)
    entry = _entry(answer, outgoing, prepared)
    if prepared and answer.code == ResponseCode.SUCCESS:
        _remember_half(host, topic, entry, answer)
    return spb.SendMessageResponse(status=status(entry.status.code), entries=[entry])


def _remember_half(host, topic: str, entry: spb.SendResultEntry, answer) -> None:
    offset_id = (answer.ext_fields or {}).get("msgId", "")
    try:
        _, _, commit_log_offset = decode_offset_message_id(offset_id.split(",")[0])
    except ValueError:
        return
    host.transactions.add(topic, entry.transaction_id, commit_log_offset, entry.offset,
                          int(time.time() * 1000))


_RESOLUTIONS = {pb.COMMIT: END_TRANSACTION_COMMIT, pb.ROLLBACK: END_TRANSACTION_ROLLBACK}


async def end_transaction_rpc(host, rctx,
                              request: spb.EndTransactionRequest) -> spb.EndTransactionResponse:
    """EndTransactionActivity: the topic is the producer group; the broker is told oneway."""
    checks.validate_topic(request.topic.name)
    if not request.transaction_id.strip():
        raise GrpcRefused(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
    group = request.topic.name
    half = host.transactions.take(group, request.transaction_id, int(time.time() * 1000))
    if half is None:
        raise proxy_exception(Code.INTERNAL_SERVER_ERROR, "cannot found transaction data")
    fields = headers.encode_header(headers.END_TRANSACTION_REQUEST, {
        "producer_group": group, "transaction_state_table_offset": half.queue_offset,
        "commit_log_offset": half.commit_log_offset,
        "commit_or_rollback": _RESOLUTIONS.get(request.resolution, END_TRANSACTION_UNKNOWN),
        "from_transaction_check": request.source == pb.SOURCE_SERVER_CHECK,
        "msg_id": request.message_id, "transaction_id": request.transaction_id,
        "topic": request.topic.name})
    remoting = create_request(RequestCode.END_TRANSACTION, fields, oneway=True)
    channel = Channel(host.channel_id(rctx), rctx.remote_address, rctx.language, rctx.version)
    await end_transaction.handle_end_transaction(host.ctx, channel, remoting)
    return spb.EndTransactionResponse(status=OK_STATUS)


def remember_check(host, group: str, transaction_id: str, commit_log_offset: int,
                   queue_offset: int) -> None:
    """A check-back names the half message's new place (the proxy keeps it the same way)."""
    host.transactions.add(group, transaction_id, commit_log_offset, queue_offset,
                          int(time.time() * 1000))


async def recall_message(host, rctx, request: spb.RecallMessageRequest):
    """RecallMessageActivity: the topic must be a DELAY topic (enableTopicMessageTypeCheck),
    then the broker's RECALL_MESSAGE (370) decides, as the proxy forwards it (a worker without
    its handler would answer as the proxy relays REQUEST_CODE_NOT_SUPPORTED: NOT_IMPLEMENTED)."""
    topic = request.topic.name
    checks.validate_topic(topic)
    if host.ctx.config.grpc.enable_topic_message_type_check:
        expected = route.topic_message_type(host.ctx.metadata.topic_config(topic))
        if expected not in (TopicMessageType.DELAY, TopicMessageType.MIXED):
            raise proxy_exception(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                  f"TopicMessageType validate failed, the expected type is "
                                  f"{expected}, but actual type is DELAY")
    fields = {"topic": topic, "recallHandle": request.recall_handle,
              "producerGroup": topic, "bname": host.ctx.config.broker.broker_name}
    remoting = create_request(RequestCode.RECALL_MESSAGE, fields)
    handler = host.local_handler(RequestCode.RECALL_MESSAGE)
    if handler is None:
        raise GrpcRefused(Code.NOT_IMPLEMENTED,
                          f"request type {int(RequestCode.RECALL_MESSAGE)} not supported")
    channel = Channel(host.channel_id(rctx), rctx.remote_address, rctx.language, rctx.version)
    answer = await handler(host.ctx, channel, remoting)
    if answer.code != ResponseCode.SUCCESS:
        refused = status_of_remoting(answer.code, answer.remark)
        raise GrpcRefused(refused.code, refused.message)
    return spb.RecallMessageResponse(status=OK_STATUS,
                                     message_id=(answer.ext_fields or {}).get("msgId", ""))
