# Client message types (Message, MessageExt, SendResult) and their wire helpers.
"""Messages as the client sees them.

* :class:`Message` - what a producer sends: topic, body, tags, keys, user properties, delay
  level.
* :class:`MessageExt` - what a consumer receives: a Message plus where it is stored.
* :class:`SendResult` - the outcome of a send.
* :func:`encode_batch` - the SEND_BATCH_MESSAGE body (protocol.md §3.6).
* :func:`compress_body` / :func:`decode_messages` - zlib above a threshold (protocol.md §3.7),
  and the records of a PULL_MESSAGE / QUERY_MESSAGE / VIEW_MESSAGE_BY_ID body (protocol.md §4.2).
"""
import dataclasses
import enum
import struct
import zlib
from typing import Iterable, Optional, Union

from pybroker._fast import record as _record
from pybroker.errors import ProtocolError
from pybroker.protocol import properties as _properties
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.constants import (
    COMPRESSION_TYPE_MASK,
    KEY_SEPARATOR,
    PROPERTIES_MAX_BYTES,
    PROPERTY_SEPARATOR,
    MessageSysFlag,
    Property,
)
from pybroker.protocol.message_id import offset_message_id

__all__ = ["Message", "MessageExt", "MessageQueue", "SendResult", "SendStatus", "compress_body",
           "decode_messages", "encode_batch", "BODY_COMPRESS_OVER_BYTES_DEFAULT"]

Body = Union[bytes, bytearray, memoryview, str]

BODY_COMPRESS_OVER_BYTES_DEFAULT = 4096   # compressMsgBodyOverHowmuch
BODY_COMPRESS_LEVEL = 5                   # what Java and Go use
# A compressed body may not inflate beyond this: a hostile record cannot exhaust memory.
BODY_INFLATED_MAX_BYTES = 64 << 20
_COMPRESSION_ZLIB_TYPES = (0, int(MessageSysFlag.COMPRESSION_ZLIB_TYPE))
# Inner batch entry: total size, magic, body CRC, flag, body length (then body, props length, props)
_BATCH_HEAD = struct.Struct(">iiiii")
_BATCH_PROPERTIES_LENGTH = struct.Struct(">h")
_BATCH_FIXED_BYTES = _BATCH_HEAD.size + _BATCH_PROPERTIES_LENGTH.size
assert _BATCH_FIXED_BYTES == 22


class Message:
    """A message to send.

    ``topic``: topic name. ``body``: bytes (str is UTF-8 encoded). ``tags``: one tag or None.
    ``keys``: a key or a list of keys (space separated on the wire), or None. ``flag``: user
    int stored with the record. ``properties``: user properties (str -> str). ``delay_level``:
    1..18 to deliver later (0 = now). ``wait_store_ok``: the broker answers after flush.
    """

    __slots__ = ("topic", "body", "flag", "properties", "transaction_id")

    def __init__(self, topic: str, body: Body, *, tags: Optional[str] = None,
                 keys: Union[str, Iterable[str], None] = None, flag: int = 0,
                 properties: Optional[dict] = None, delay_level: int = 0,
                 wait_store_ok: bool = True):
        self.topic = topic
        self.body = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        self.flag = flag
        self.properties: dict[str, str] = {}
        self.transaction_id: Optional[str] = None
        if properties:
            for name, value in properties.items():
                self.put_user_property(name, value)
        if tags:
            self.properties[Property.TAGS] = tags
        if keys:
            self.keys = [keys] if isinstance(keys, str) else list(keys)
        if delay_level:
            self.delay_level = delay_level
        if not wait_store_ok:
            self.properties[Property.WAIT_STORE_MSG_OK] = "false"

    def put_user_property(self, name: str, value: str) -> None:
        """Set a user property; ValueError for an empty name or value."""
        if not name or value is None or value == "":
            raise ValueError(f"user property {name!r}={value!r}: name and value must be set")
        self.properties[name] = str(value)

    @property
    def tags(self) -> Optional[str]:
        """The tag (``TAGS`` property) or None."""
        return self.properties.get(Property.TAGS)

    @tags.setter
    def tags(self, value: Optional[str]) -> None:
        self._set(Property.TAGS, value)

    @property
    def keys(self) -> list[str]:
        """The user keys (``KEYS`` property), possibly empty."""
        return _properties.keys_of(self.properties)

    @keys.setter
    def keys(self, value: Iterable[str]) -> None:
        self._set(Property.KEYS, KEY_SEPARATOR.join(value) or None)

    @property
    def delay_level(self) -> int:
        """Delay level (``DELAY`` property): 0 = none, 1..18 = the broker's delay levels."""
        return int(self.properties.get(Property.DELAY_TIME_LEVEL, "0") or 0)

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        if not isinstance(level, int) or level < 0:
            raise ValueError(f"delay level {level!r} must be an int >= 0")
        self._set(Property.DELAY_TIME_LEVEL, str(level) if level else None)

    # --- 5.x timer messages (any delivery time; the broker parks them in its timer wheel) --
    @property
    def deliver_time_ms(self) -> int:
        """Delivery time (ms since the epoch, ``TIMER_DELIVER_MS``), 0 when not set."""
        return int(self.properties.get(Property.TIMER_DELIVER_MS, "0") or 0)

    @deliver_time_ms.setter
    def deliver_time_ms(self, time_ms: int) -> None:
        """Deliver at ``time_ms`` (ms since the epoch; a time not in the future delivers at
        once). A 5.x broker holds the message until then, at most one timer precision
        (timerPrecisionMs, default 1 s) late; a 4.x broker delivers it at once."""
        self._set(Property.TIMER_DELIVER_MS, str(int(time_ms)))

    @property
    def delay_time_sec(self) -> int:
        """Delay (s, ``TIMER_DELAY_SEC``), 0 when not set."""
        return int(self.properties.get(Property.TIMER_DELAY_SEC, "0") or 0)

    @delay_time_sec.setter
    def delay_time_sec(self, seconds: int) -> None:
        """Deliver ``seconds`` after the broker receives it (it wins over the other timer
        properties; a delay level wins over all of them)."""
        self._set(Property.TIMER_DELAY_SEC, str(int(seconds)))

    @property
    def delay_time_ms(self) -> int:
        """Delay (ms, ``TIMER_DELAY_MS``), 0 when not set."""
        return int(self.properties.get(Property.TIMER_DELAY_MS, "0") or 0)

    @delay_time_ms.setter
    def delay_time_ms(self, milliseconds: int) -> None:
        """Deliver ``milliseconds`` after the broker receives it (wins over deliver_time_ms)."""
        self._set(Property.TIMER_DELAY_MS, str(int(milliseconds)))

    @property
    def uniq_id(self) -> Optional[str]:
        """The client unique id (``UNIQ_KEY``) once sent, else None."""
        return self.properties.get(Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def _set(self, name: str, value: Optional[str]) -> None:
        if value is None:
            self.properties.pop(name, None)
        else:
            self.properties[name] = value

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(topic={self.topic!r}, tags={self.tags!r}, "
                f"keys={self.keys!r}, body=<{len(self.body)} bytes>)")


class MessageExt(Message):
    """A message as stored and delivered: :class:`Message` plus its place in the store.

    Offsets: ``queue_offset`` (entry index in its consume queue), ``physical_offset`` (bytes in
    the commit log). Times in ms since the epoch. ``msg_id`` is the unique id when the producer
    set one, else the offset message id; ``offset_msg_id`` always the latter.
    """

    __slots__ = ("queue_id", "queue_offset", "physical_offset", "sys_flag", "born_timestamp",
                 "born_host", "store_timestamp", "store_host", "reconsume_times",
                 "prepared_transaction_offset", "body_crc", "msg_id", "offset_msg_id",
                 "broker_name")

    def __init__(self, topic: str, body: Body):
        super().__init__(topic, body)
        self.queue_id = 0
        self.queue_offset = 0
        self.physical_offset = 0
        self.sys_flag = 0
        self.born_timestamp = 0
        self.born_host = ""
        self.store_timestamp = 0
        self.store_host = ""
        self.reconsume_times = 0
        self.prepared_transaction_offset = 0
        self.body_crc = 0
        self.msg_id = ""
        self.offset_msg_id = ""
        self.broker_name = ""

    @property
    def message_queue(self) -> MessageQueue:
        """The queue this message was read from."""
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def __repr__(self) -> str:
        return (f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, msg_id={self.msg_id!r}, tags={self.tags!r}, "
                f"reconsume_times={self.reconsume_times}, body=<{len(self.body)} bytes>)")


class SendStatus(enum.Enum):
    """How a stored message was stored (the four 'stored' response codes)."""
    SEND_OK = 0
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12


@dataclasses.dataclass(frozen=True)
class SendResult:
    """Outcome of a send.

    ``msg_id``: the client unique id (UNIQ_KEY; a batch's ids joined by ``,``).
    ``offset_msg_id``: the broker's offset message id(s). ``message_queue``: where it went.
    ``queue_offset``: consume-queue index of the (first) message. ``recall_handle``: for a
    timer message parked by a 5.x broker, what :meth:`Producer.recall_message` takes.
    """
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: Optional[str] = None
    region_id: Optional[str] = None
    trace_on: bool = True
    recall_handle: Optional[str] = None    # a 5.x broker's handle of a parked timer message


def compress_body(body: bytes, over_bytes: int = BODY_COMPRESS_OVER_BYTES_DEFAULT
                  ) -> tuple[bytes, int]:
    """``(wire body, sys_flag bits)``: zlib at level 5 when ``len(body) >= over_bytes``.

    Bits are COMPRESSED | COMPRESSION_ZLIB_TYPE (0x301) as Java 4.9.4+ sets them, or 0 when
    the body stays as is (below the threshold, or when compression would not shrink it).
    """
    if len(body) < over_bytes:
        return body, 0
    compressed = zlib.compress(body, BODY_COMPRESS_LEVEL)
    if len(compressed) >= len(body):
        return body, 0
    return compressed, int(MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_ZLIB_TYPE)


def inflate_body(body, sys_flag: int, inflated_max_bytes: int = BODY_INFLATED_MAX_BYTES
                 ) -> bytes:
    """The body of a record whose sys_flag has COMPRESSED set, inflated (zlib only).

    ProtocolError for another algorithm, a broken stream, or a body inflating beyond
    ``inflated_max_bytes``.
    """
    compression_type = sys_flag & COMPRESSION_TYPE_MASK
    if compression_type not in _COMPRESSION_ZLIB_TYPES:
        raise ProtocolError(f"body compressed with type {compression_type >> 8:#x}; only zlib "
                            "is supported")
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(body, inflated_max_bytes)
    except zlib.error as error:
        raise ProtocolError(f"compressed body is not a zlib stream: {error}") from None
    if inflater.unconsumed_tail:
        raise ProtocolError(f"compressed body inflates beyond {inflated_max_bytes} bytes")
    return inflated


def encode_batch(messages: Iterable[Message]) -> bytes:
    """The SEND_BATCH_MESSAGE body: each message's flag, body and own properties (protocol.md §3.6).

    Magic and body CRC are written as 0 (the broker computes its own). ValueError when a
    properties string does not fit its signed 16-bit length.
    """
    chunks = []
    for message in messages:
        # Java 4.9.x leaves out the separator after the last pair; the broker accepts both and
        # inserts one before the batch properties it appends.
        properties = _properties.encode_properties(message.properties).rstrip(
            PROPERTY_SEPARATOR).encode("utf-8")
        if len(properties) > PROPERTIES_MAX_BYTES:
            raise ValueError(f"properties of {len(properties)} bytes exceed "
                             f"{PROPERTIES_MAX_BYTES}")
        total_size = _BATCH_FIXED_BYTES + len(message.body) + len(properties)
        chunks += [_BATCH_HEAD.pack(total_size, 0, 0, message.flag, len(message.body)),
                   message.body, _BATCH_PROPERTIES_LENGTH.pack(len(properties)), properties]
    return b"".join(chunks)


def _host_text(host: bytes, port: int) -> str:
    if len(host) == 4:
        return f"{host[0]}.{host[1]}.{host[2]}.{host[3]}:{port}"
    return f"[{host.hex()}]:{port}"


def _message_from_record(item, broker_name: str, inflate: bool) -> MessageExt:
    body = item.body
    if inflate and item.sys_flag & MessageSysFlag.COMPRESSED:
        body = inflate_body(body, item.sys_flag)
    message = MessageExt(item.topic, body)
    message.properties = _properties.decode_properties(item.properties)
    message.flag = item.flag
    message.queue_id = item.queue_id
    message.queue_offset = item.queue_offset
    message.physical_offset = item.physical_offset
    message.sys_flag = item.sys_flag
    message.born_timestamp = item.born_timestamp
    message.born_host = _host_text(item.born_host, item.born_port)
    message.store_timestamp = item.store_timestamp
    message.store_host = _host_text(item.store_host, item.store_port)
    message.reconsume_times = item.reconsume_times
    message.prepared_transaction_offset = item.prepared_transaction_offset
    message.body_crc = item.body_crc
    message.offset_msg_id = offset_message_id(item.store_host, item.store_port,
                                              item.physical_offset)
    message.msg_id = message.uniq_id or message.offset_msg_id
    message.broker_name = broker_name
    message.transaction_id = message.properties.get(Property.TRANSACTION_ID)
    return message


def decode_messages(body, broker_name: str = "", *, inflate: bool = True,
                    check_crc: bool = False) -> list[MessageExt]:
    """Every record of a PULL_MESSAGE / QUERY_MESSAGE / VIEW_MESSAGE_BY_ID body, in order.

    ``body``: any buffer of whole CommitLog records. Compressed bodies are inflated unless
    ``inflate`` is false. ProtocolError on a truncated or corrupt record (nothing is read past
    the buffer).
    """
    messages = []
    position = 0
    end = len(body)
    while position < end:
        status, total_size = _record.check(body, position, end, check_crc)
        if status != _record.RECORD_OK:
            raise ProtocolError(f"message body: no whole record at byte {position} "
                                f"(status {status})")
        messages.append(_message_from_record(_record.decode(body, position), broker_name,
                                             inflate))
        position += total_size
    return messages
