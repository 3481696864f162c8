# The transaction check service: asks producers about half messages left unfinished too long.
"""TransactionCheckService (protocol.md §2.8, §5.3; Java 4.9 ``TransactionalMessageServiceImpl``).

One pass (:meth:`TransactionCheckService.run_once`) over half queue 0 of
RMQ_SYS_TRANS_HALF_TOPIC:

1. read the op queue (RMQ_SYS_TRANS_OP_HALF_TOPIC, same queue id) from its offset: each marker's
   body names finished half queue offsets;
2. walk the half queue from its offset: a finished offset is skipped; a half message whose
   ``TRANSACTION_CHECK_TIMES`` reached ``transactionCheckMax`` moves to
   TRANS_CHECK_MAX_TIME_TOPIC; one younger than ``transactionTimeOut`` (or its
   ``CHECK_IMMUNITY_TIME_IN_SECONDS``, then it is put back carrying its first offset and the walk
   goes on, as in Java) ends the walk; any other is re-appended to the half queue
   with the counter + 1 and CHECK_TRANSACTION_STATE (oneway, body = the re-appended record with
   REAL topic/queue restored) goes to one live channel of its producer group (``PGROUP``);
3. the half and op offsets advance past what is finished and are committed under the group
   CID_RMQ_SYS_TRANS in the metadata's consumer offsets.

The metadata object must offer ``producer_channels(group)``, ``query(group, topic, queue_id)``
(-1 when absent) and ``commit(group, topic, queue_id, offset)`` (MetadataState does).
"""
import asyncio
import logging
import random

from pybroker import clock
from pybroker.tasks import Rounds
from pybroker._fast import record as record_codec
from pybroker.broker.reput import read_batch, real_destination, reput_message
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import Property, SystemGroup, SystemTopic
from pybroker.protocol.message_id import offset_message_id
from pybroker.protocol.properties import decode_properties
from pybroker.stats.metric_names import TransactionEvent

log = logging.getLogger("pybroker.broker.transaction_check")

HALF_QUEUE_ID = 0
OP_READ_MAX = 8192           # op markers read in one pass
HALF_SCAN_MAX = 4096         # half messages examined in one pass
_GROUP = SystemGroup.TRANS_CHECK


def op_marker_offsets(body) -> list[int]:
    """Half queue offsets named by an op marker body: ``"5"`` (4.9) or ``"5,6,"`` (5.x)."""
    offsets = []
    for part in bytes(body).decode("ascii", "replace").split(","):
        part = part.strip()
        if part.isdigit():
            offsets.append(int(part))
    return offsets


def check_request(decoded, properties: dict[str, str], physical_offset: int, queue_offset: int,
                  broker_name: str):
    """The oneway CHECK_TRANSACTION_STATE for the half record just re-appended at
    ``physical_offset``/``queue_offset``.

    Header as Java 5.3.3's sendCheckMessage fills it: the record's own topic (the half topic)
    and ``bname`` (the broker's name; a 5.x client ends the transaction with it, the proxy
    ignores both). Body: that record with REAL topic/queue restored and the properties Java's
    sendCheckMessage encodes (the map after the check: TRANSACTION_CHECK_TIMES counted and
    ``WAIT=false``, which a producer's checkLocalTransaction sees).
    """
    uniq_id = properties.get(Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    fields = headers.encode_header(headers.CHECK_TRANSACTION_STATE_REQUEST, {
        "transaction_state_table_offset": queue_offset, "commit_log_offset": physical_offset,
        "msg_id": uniq_id, "transaction_id": uniq_id,
        "offset_msg_id": offset_message_id(decoded.store_host, decoded.store_port,
                                           physical_offset),
        "topic": decoded.topic, "broker_name": broker_name})
    shown = dict(properties)
    shown[Property.WAIT_STORE_MSG_OK] = "false"
    destination = real_destination(properties) or (decoded.topic, 0)
    body = reput_message(decoded, destination[0], destination[1], shown,
                         prepared_transaction_offset=decoded.prepared_transaction_offset,
                         store_timestamp=decoded.store_timestamp, queue_offset=queue_offset,
                         physical_offset=physical_offset).records
    return create_request(RequestCode.CHECK_TRANSACTION_STATE, fields, bytes(body), oneway=True)


def _next_op_offset(op_offset: int, done_op_offsets: set[int]) -> int:
    """Java calculateOpOffset: advance over the contiguous run of finished op offsets."""
    while op_offset in done_op_offsets:
        op_offset += 1
    return op_offset


class TransactionCheckService:
    """Checks unfinished half messages; the supervisor runs :meth:`run`, which calls
    :meth:`run_once` every ``transactionCheckInterval`` ms.

    ``settings`` offers ``transaction_time_out`` (ms), ``transaction_check_max`` (count),
    ``transaction_check_interval`` (ms) and ``broker_name``: ``config.broker``.
    """

    def __init__(self, store_reader, putter, metadata, settings, stats=None):
        self.store_reader = store_reader
        self.putter = putter
        self.metadata = metadata
        self.settings = settings
        self.stats = stats          # a Recorder (the discards of rocketmq_half_messages)
        self._random = random.Random()

    def _start_offset(self, topic: str, queue_id: int) -> int:
        offset = self.metadata.offsets.query(_GROUP, topic, queue_id)
        if offset < 0:
            offset = max(0, self.store_reader.get_min_offset_in_queue(topic, queue_id))
        return offset

    def _records(self, topic: str, queue_id: int, queue_offset: int, limit: int):
        """Yield (queue offset, record bytes) from ``queue_offset``, at most ``limit``."""
        produced = 0
        while produced < limit:
            start, batch = read_batch(self.store_reader, _GROUP, topic, queue_id, queue_offset)
            if start != queue_offset:
                queue_offset = start
                continue
            if not batch:
                return
            for data in batch:
                yield queue_offset, data
                queue_offset += 1
                produced += 1

    def _read_op_queue(self, op_offset: int, half_offset: int):
        """(finished half offset -> op offset for those >= half_offset, done op offsets)."""
        remove_map: dict[int, int] = {}
        done_op_offsets: set[int] = set()
        for queue_offset, data in self._records(SystemTopic.TRANS_OP_HALF, HALF_QUEUE_ID,
                                                op_offset, OP_READ_MAX):
            decoded = record_codec.decode(data, 0)
            for half_queue_offset in op_marker_offsets(decoded.body):
                if half_queue_offset < half_offset:
                    done_op_offsets.add(queue_offset)
                else:
                    remove_map[half_queue_offset] = queue_offset
        return remove_map, done_op_offsets

    async def run(self, settings_of) -> None:
        """A pass every ``transactionCheckInterval`` until cancelled, with the settings
        ``settings_of()`` gives at that moment (UPDATE_BROKER_CONFIG may change them); each
        pass guarded (pybroker/tasks.py: one that raises is logged and retried an interval
        later, as Java's check logs and waits for the next; too many in a row, or an invariant
        violation, end this with the error)."""
        rounds = Rounds("transaction checks", logger=log)
        while True:
            await asyncio.sleep(settings_of().transaction_check_interval / 1000)
            with rounds:
                self.settings = settings_of()
                await self.run_once(clock.now_ms())

    async def run_once(self, now_ms: int) -> int:
        """One check pass at ``now_ms``; returns how many check requests were issued."""
        half_offset = self._start_offset(SystemTopic.TRANS_HALF, HALF_QUEUE_ID)
        op_offset = self._start_offset(SystemTopic.TRANS_OP_HALF, HALF_QUEUE_ID)
        remove_map, done_op_offsets = self._read_op_queue(op_offset, half_offset)
        # Records appended from here on (this pass's re-appends) wait for the next pass.
        half_end = self.store_reader.get_max_offset_in_queue(SystemTopic.TRANS_HALF,
                                                             HALF_QUEUE_ID)
        checks = 0
        next_half_offset = half_offset
        for queue_offset, data in self._records(SystemTopic.TRANS_HALF, HALF_QUEUE_ID,
                                                half_offset, HALF_SCAN_MAX):
            if queue_offset >= half_end:
                break
            if queue_offset in remove_map:
                done_op_offsets.add(remove_map.pop(queue_offset))
            else:
                outcome = await self._examine(data, now_ms, remove_map, done_op_offsets)
                if outcome is None:
                    break
                checks += outcome
            next_half_offset = queue_offset + 1
        if next_half_offset != half_offset:
            self.metadata.offsets.commit(_GROUP, SystemTopic.TRANS_HALF, HALF_QUEUE_ID,
                                         next_half_offset)
        next_op_offset = _next_op_offset(op_offset, done_op_offsets)
        if next_op_offset != op_offset:
            self.metadata.offsets.commit(_GROUP, SystemTopic.TRANS_OP_HALF, HALF_QUEUE_ID,
                                 next_op_offset)
        return checks

    def _immunity_ms(self, properties: dict[str, str]) -> tuple[int, bool]:
        """(age before the first check in ms, whether the message set its own)."""
        text = properties.get(Property.CHECK_IMMUNITY_TIME_IN_SECONDS)
        timeout_ms = self.settings.transaction_time_out
        if text is None:
            return timeout_ms, False
        try:
            seconds = int(text)
        except ValueError:
            return timeout_ms, True
        return (seconds * 1000 if seconds >= 0 else timeout_ms), True

    async def _examine(self, data: bytes, now_ms: int, remove_map: dict[int, int],
                       done_op_offsets: set[int]) -> int | None:
        """1 checked, 0 finished, discarded or put back immune, None: stop the walk here."""
        decoded = record_codec.decode(data, 0)
        properties = decode_properties(decoded.properties)
        try:
            check_times = int(properties.get(Property.TRANSACTION_CHECK_TIMES, "0"))
        except ValueError:
            check_times = 0
        if check_times >= self.settings.transaction_check_max:
            return await self._discard(decoded, properties)
        # Java's needDiscard counts the check before the age tests, immune put-backs too.
        properties[Property.TRANSACTION_CHECK_TIMES] = str(check_times + 1)
        age_ms = now_ms - decoded.born_timestamp
        immunity_ms, own_immunity = self._immunity_ms(properties)
        if own_immunity and age_ms < immunity_ms:
            return await self._immune(decoded, properties, remove_map, done_op_offsets)
        if 0 <= age_ms < immunity_ms:
            return None
        # Java's renewHalfMessageInner stores the properties with the new check count.
        result = await self._put(reput_message(decoded, decoded.topic, decoded.queue_id,
                                               properties))
        if not result.status.stored:
            log.error("transaction check: re-append of a half message failed: %s",
                      result.status.name)
            return None
        self._send_check(decoded, properties, result.physical_offset, result.queue_offset)
        return 1

    async def _immune(self, decoded, properties: dict[str, str], remove_map: dict[int, int],
                      done_op_offsets: set[int]) -> int | None:
        """A half message still inside its own CHECK_IMMUNITY_TIME_IN_SECONDS (Java's
        checkPrepareQueueOffset): finished when the op queue names its first half offset
        (TRANSACTION_PREPARED_QUEUE_OFFSET), else put back at the end of the half queue
        carrying that offset, so the walk goes on. None (stop) on a bad offset or put."""
        text = properties.get(Property.TRANSACTION_PREPARED_QUEUE_OFFSET)
        if text is not None:
            try:
                first_offset = int(text)
            except ValueError:
                return None
            if first_offset == -1:
                return None
            if first_offset in remove_map:
                done_op_offsets.add(remove_map.pop(first_offset))
                return 0
        else:
            text = str(decoded.queue_offset)
        # renewImmunityHalfMessageInner recomputes the string after WAIT was set false.
        properties[Property.TRANSACTION_PREPARED_QUEUE_OFFSET] = text
        properties[Property.WAIT_STORE_MSG_OK] = "false"
        result = await self._put(reput_message(decoded, decoded.topic, decoded.queue_id,
                                               properties))
        if not result.status.stored:
            log.error("transaction check: put-back of an immune half message failed: %s",
                      result.status.name)
            return None
        return 0

    def _send_check(self, decoded, properties, physical_offset: int, queue_offset: int) -> None:
        group = properties.get(Property.PRODUCER_GROUP, "")
        channels = self.metadata.producers.producer_channels(group) if group else []
        if not channels:
            log.warning("transaction check: no live producer of group %r", group)
            return
        channel = channels[self._random.randrange(len(channels))]
        request = check_request(decoded, properties, physical_offset, queue_offset,
                                self.settings.broker_name)
        try:
            channel.send(request)
        except (ConnectionError, OSError) as error:
            log.warning("transaction check to %s failed: %s", channel.remote_address, error)

    async def _put(self, reput):
        return await self.putter.put(reput.records, reput.topic, reput.queue_id, 1,
                                     reput.sys_flag, False)

    async def _discard(self, decoded, properties: dict[str, str]) -> int:
        """Move a half message checked too often to TRANS_CHECK_MAX_TIME_TOPIC queue 0, its
        properties as stored (Java's toMessageExtBrokerInner)."""
        result = await self._put(reput_message(decoded, SystemTopic.TRANS_CHECK_MAX_TIME, 0,
                                               properties))
        if not result.status.stored:
            log.error("transaction check: discard to %s failed: %s",
                      SystemTopic.TRANS_CHECK_MAX_TIME, result.status.name)
        elif self.stats is not None:       # Java's TransactionMetrics: one half message less
            self.stats.transaction(properties.get(Property.REAL_TOPIC, ""),
                                   TransactionEvent.DISCARDED)
        return 0
