# On-disk layouts of RocketMQ's store files: offsets and sizes, derived from each other and
# asserted at import (protocol.md §4). Nothing here is configuration.
"""Byte layouts of the CommitLog record, ConsumeQueue unit, IndexFile and checkpoint.

CommitLog record, v1 magic, IPv4 born and store hosts (IPv6 hosts are 20 bytes each and shift
everything after them; :func:`record_size` handles both)::

    off  size  field
      0     4  TOTALSIZE                 whole record length
      4     4  MAGICCODE                 v1 0xDAA320A7 / v2 0xDAA320AB
      8     4  BODYCRC                   crc32(body) & 0x7FFFFFFF
     12     4  QUEUEID
     16     4  FLAG                      user flag
     20     8  QUEUEOFFSET               consume-queue index
     28     8  PHYSICALOFFSET            file base + file position
     36     4  SYSFLAG
     40     8  BORNTIMESTAMP             ms
     48   8/20 BORNHOST                  ip + port(int)
     56     8  STORETIMESTAMP            ms, set at append
     64   8/20 STOREHOSTADDRESS          ip + port(int)
     72     4  RECONSUMETIMES
     76     8  PREPARED TRANSACTION OFFSET
     84   4+n  BODY                      int length + bytes
   88+n   1+t  TOPIC                     v1: signed byte length (v2: short) + utf-8
      .   2+p  PROPERTIES                short length + properties string
"""

# --- CommitLog record ---------------------------------------------------------------------------
MESSAGE_MAGIC_CODE_V1 = -626843481   # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = -626843477   # 0xDAA320AB
BLANK_MAGIC_CODE = -875286124        # 0xCBD43194: end-of-file filler marker
assert MESSAGE_MAGIC_CODE_V1 == 0xDAA320A7 - (1 << 32)
assert MESSAGE_MAGIC_CODE_V2 == 0xDAA320AB - (1 << 32)
assert BLANK_MAGIC_CODE == 0xCBD43194 - (1 << 32)

# The BLANK marker is TOTALSIZE + MAGIC; every non-final file keeps room for it.
END_FILE_MIN_BLANK_BYTES = 4 + 4

IPV4_HOST_BYTES = 4 + 4     # address + port(int)
IPV6_HOST_BYTES = 16 + 4

RECORD_TOTAL_SIZE_POSITION = 0
RECORD_MAGIC_POSITION = RECORD_TOTAL_SIZE_POSITION + 4
RECORD_BODY_CRC_POSITION = RECORD_MAGIC_POSITION + 4
RECORD_QUEUE_ID_POSITION = RECORD_BODY_CRC_POSITION + 4
RECORD_FLAG_POSITION = RECORD_QUEUE_ID_POSITION + 4
RECORD_QUEUE_OFFSET_POSITION = RECORD_FLAG_POSITION + 4
RECORD_PHYSICAL_OFFSET_POSITION = RECORD_QUEUE_OFFSET_POSITION + 8
RECORD_SYS_FLAG_POSITION = RECORD_PHYSICAL_OFFSET_POSITION + 8
RECORD_BORN_TIMESTAMP_POSITION = RECORD_SYS_FLAG_POSITION + 4
RECORD_BORN_HOST_POSITION = RECORD_BORN_TIMESTAMP_POSITION + 8
# Fields after BORNHOST move with the host sizes; these are the IPv4/IPv4 positions.
RECORD_STORE_TIMESTAMP_POSITION_V4 = RECORD_BORN_HOST_POSITION + IPV4_HOST_BYTES
RECORD_STORE_HOST_POSITION_V4 = RECORD_STORE_TIMESTAMP_POSITION_V4 + 8
RECORD_RECONSUME_TIMES_POSITION_V4 = RECORD_STORE_HOST_POSITION_V4 + IPV4_HOST_BYTES
RECORD_PREPARED_OFFSET_POSITION_V4 = RECORD_RECONSUME_TIMES_POSITION_V4 + 4
RECORD_BODY_LENGTH_POSITION_V4 = RECORD_PREPARED_OFFSET_POSITION_V4 + 8
assert (RECORD_QUEUE_OFFSET_POSITION, RECORD_PHYSICAL_OFFSET_POSITION) == (20, 28)
assert (RECORD_SYS_FLAG_POSITION, RECORD_BORN_TIMESTAMP_POSITION) == (36, 40)
assert (RECORD_STORE_TIMESTAMP_POSITION_V4, RECORD_STORE_HOST_POSITION_V4) == (56, 64)
assert (RECORD_RECONSUME_TIMES_POSITION_V4, RECORD_BODY_LENGTH_POSITION_V4) == (72, 84)

# Fixed bytes of a record without hosts, body, topic and properties bytes:
# totalsize, magic, crc, queueid, flag, queueoffset, physoffset, sysflag, borntime,
# storetime, reconsume, prepared offset, body length, properties length.
RECORD_FIXED_BYTES_WITHOUT_HOSTS = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 4 + 8 + 4 + 2
TOPIC_LENGTH_BYTES_V1 = 1
TOPIC_LENGTH_BYTES_V2 = 2
TOPIC_MAX_BYTES_V1 = 127    # a signed byte
# The longest topic a record carries (Java 5.x HookUtils: a topic names a consume-queue
# directory, and a file name has at most 255 bytes); only retry topics go past 127.
TOPIC_MAX_BYTES = 255


def topic_storable(topic_bytes: int, retry_topic: bool, auto_message_version: bool) -> bool:
    """Whether a record may carry a topic of ``topic_bytes`` UTF-8 bytes (Java 5.x's store
    rule): 1..127 bytes in a V1 record; a retry topic (``retry_topic``) up to 255 bytes in a
    V2 record (2-byte topic length), written when ``autoMessageVersionOnTopicLen`` is on
    (``auto_message_version``; Java would then write a V1 record whose 1-byte length cannot
    hold the name, so it is refused here)."""
    if topic_bytes <= 0:
        return False
    if topic_bytes <= TOPIC_MAX_BYTES_V1:
        return True
    return retry_topic and auto_message_version and topic_bytes <= TOPIC_MAX_BYTES


def record_size(body_bytes: int, topic_bytes: int, properties_bytes: int,
                born_host_v6: bool = False, store_host_v6: bool = False,
                topic_length_bytes: int = TOPIC_LENGTH_BYTES_V1) -> int:
    """Total size of a CommitLog record with these variable parts."""
    hosts = ((IPV6_HOST_BYTES if born_host_v6 else IPV4_HOST_BYTES)
             + (IPV6_HOST_BYTES if store_host_v6 else IPV4_HOST_BYTES))
    return (RECORD_FIXED_BYTES_WITHOUT_HOSTS + hosts + topic_length_bytes
            + body_bytes + topic_bytes + properties_bytes)


assert record_size(0, 0, 0) == 91   # the reference's "91 + n + t + p"

# --- ConsumeQueue unit (protocol.md §4.4) ---------------------------------------------------------
CQ_UNIT_PHYSICAL_OFFSET_POSITION = 0
CQ_UNIT_SIZE_POSITION = CQ_UNIT_PHYSICAL_OFFSET_POSITION + 8
CQ_UNIT_TAGS_CODE_POSITION = CQ_UNIT_SIZE_POSITION + 4
CQ_STORE_UNIT_SIZE = CQ_UNIT_TAGS_CODE_POSITION + 8
assert CQ_STORE_UNIT_SIZE == 8 + 4 + 8 == 20
CQ_FILLER_SIZE = 0x7FFFFFFF   # size of the filler units written before a late first entry

# --- IndexFile (protocol.md §4.5) -----------------------------------------------------------------
INDEX_HEADER_BEGIN_TIMESTAMP_POSITION = 0
INDEX_HEADER_END_TIMESTAMP_POSITION = 8
INDEX_HEADER_BEGIN_PHY_OFFSET_POSITION = 16
INDEX_HEADER_END_PHY_OFFSET_POSITION = 24
INDEX_HEADER_HASH_SLOT_COUNT_POSITION = 32
INDEX_HEADER_INDEX_COUNT_POSITION = 36
INDEX_HEADER_SIZE = INDEX_HEADER_INDEX_COUNT_POSITION + 4
assert INDEX_HEADER_SIZE == 40
INDEX_HASH_SLOT_SIZE = 4
INDEX_ENTRY_KEY_HASH_POSITION = 0
INDEX_ENTRY_PHY_OFFSET_POSITION = 4
INDEX_ENTRY_TIME_DIFF_POSITION = 12
INDEX_ENTRY_PREV_INDEX_POSITION = 16
INDEX_ENTRY_SIZE = INDEX_ENTRY_PREV_INDEX_POSITION + 4
assert INDEX_ENTRY_SIZE == 4 + 8 + 4 + 4 == 20
INDEX_FIRST_ENTRY_NUMBER = 1   # entry 0 is never used: 0 means "empty slot / end of chain"


def index_file_size(max_hash_slot_num: int, max_index_num: int) -> int:
    """Bytes of one IndexFile with the given slot and entry counts."""
    return INDEX_HEADER_SIZE + max_hash_slot_num * INDEX_HASH_SLOT_SIZE \
        + max_index_num * INDEX_ENTRY_SIZE


assert index_file_size(5_000_000, 20_000_000) == 420_000_040

# --- Checkpoint (protocol.md §4.6) ----------------------------------------------------------------
CHECKPOINT_PHYSIC_MSG_TIMESTAMP_POSITION = 0
CHECKPOINT_LOGICS_MSG_TIMESTAMP_POSITION = 8
CHECKPOINT_INDEX_MSG_TIMESTAMP_POSITION = 16
CHECKPOINT_MASTER_FLUSHED_OFFSET_POSITION = 24
CHECKPOINT_CONFIRM_PHY_OFFSET_POSITION = 32
# pybroker only, in bytes Java never reads or writes (it writes 0..39 and leaves the rest of the
# page as it was): the CommitLog offset flushed when the page was last stored, and a stamp
# binding it to the fields before it (CHECKPOINT_STAMP_MARKER << 32 | crc32 of bytes 0..47).
# A Java broker that stores its own times afterwards breaks the stamp: the offset then counts
# as unknown.
CHECKPOINT_COMMITLOG_FLUSHED_OFFSET_POSITION = 40
CHECKPOINT_STAMP_POSITION = 48
CHECKPOINT_STAMP_MARKER = int.from_bytes(b"PBCK", "big")
assert CHECKPOINT_COMMITLOG_FLUSHED_OFFSET_POSITION == CHECKPOINT_CONFIRM_PHY_OFFSET_POSITION + 8
assert CHECKPOINT_STAMP_POSITION == CHECKPOINT_COMMITLOG_FLUSHED_OFFSET_POSITION + 8
CHECKPOINT_FILE_SIZE = 4096
# Abnormal recovery starts this far before min(physic, logics) timestamps.
CHECKPOINT_RECOVERY_SAFETY_MS = 3000

# --- File names ---------------------------------------------------------------------------------
OFFSET_FILE_NAME_DIGITS = 20          # commitlog/ and consumequeue/ segment names
INDEX_FILE_NAME_FORMAT = "%Y%m%d%H%M%S"  # + 3 digits of milliseconds = 17 digits

# --- Timer store (Java 5.x RIP-43: timerlog/, timerwheel, config/timercheck) ---------------------
# TimerLog unit: one per enqueued timer message, appended to 20-digit-named files of
# mappedFileSizeTimerLog bytes; units of one wheel slot are chained through PREV_POS (newest
# first), the slot holding the first and last position.
#
#     off size field
#       0    4  SIZE            TIMERLOG_UNIT_SIZE (a blank names the bytes to the file end)
#       4    8  PREV_POS        timerlog offset of the slot's previous unit, -1 for none
#      12    4  MAGIC           TIMER_MAGIC_* bits (the blank: BLANK_MAGIC_CODE)
#      16    8  WRITE_TIME      ms; the wheel's write time when enqueued (TIMER_ENQUEUE_MS)
#      24    4  DELAY           ms after WRITE_TIME of the slot (delayed time - write time)
#      28    8  OFFSET_PY       CommitLog physical offset of the message
#      36    4  SIZE_PY         its record size
#      40    4  TOPIC_HASH      Java String.hashCode of REAL_TOPIC (0 without one)
#      44    8  RESERVED        0
TIMERLOG_SIZE_POSITION = 0
TIMERLOG_PREV_POS_POSITION = TIMERLOG_SIZE_POSITION + 4
TIMERLOG_MAGIC_POSITION = TIMERLOG_PREV_POS_POSITION + 8
TIMERLOG_WRITE_TIME_POSITION = TIMERLOG_MAGIC_POSITION + 4
TIMERLOG_DELAY_POSITION = TIMERLOG_WRITE_TIME_POSITION + 8
TIMERLOG_OFFSET_PY_POSITION = TIMERLOG_DELAY_POSITION + 4
TIMERLOG_SIZE_PY_POSITION = TIMERLOG_OFFSET_PY_POSITION + 8
TIMERLOG_TOPIC_HASH_POSITION = TIMERLOG_SIZE_PY_POSITION + 4
TIMERLOG_RESERVED_POSITION = TIMERLOG_TOPIC_HASH_POSITION + 4
TIMERLOG_UNIT_SIZE = TIMERLOG_RESERVED_POSITION + 8
assert TIMERLOG_UNIT_SIZE == 4 + 8 + 4 + 8 + 4 + 8 + 4 + 4 + 8 == 52
assert (TIMERLOG_OFFSET_PY_POSITION, TIMERLOG_TOPIC_HASH_POSITION) == (28, 40)
# The end-of-file blank: SIZE (bytes left), 8 zero bytes, BLANK_MAGIC_CODE; every file keeps
# room for it after its last unit.
TIMERLOG_MIN_BLANK_BYTES = 4 + 8 + 4
TIMER_MAGIC_DEFAULT = 1
TIMER_MAGIC_ROLL = 1 << 1       # parked again further on: delivered to rmq_sys_wheel_timer
TIMER_MAGIC_DELETE = 1 << 2     # a cancel mark (TIMER_DEL_UNIQKEY), never delivered
TIMER_MAGIC_MASK = 0xF          # Java's isMagicOK: no bit outside the low four


def timerlog_last_unit_position(file_size: int) -> int:
    """File position of the last unit a timerlog file of ``file_size`` bytes can hold (the
    expired-file check reads it)."""
    return file_size - (file_size - TIMERLOG_MIN_BLANK_BYTES) % TIMERLOG_UNIT_SIZE \
        - TIMERLOG_MIN_BLANK_BYTES - TIMERLOG_UNIT_SIZE


assert timerlog_last_unit_position(100 * 1024 * 1024) % TIMERLOG_UNIT_SIZE == 0

# TimerWheel slot: a fixed-size file of 2 * TIMER_WHEEL_SLOTS slots, slot of time t at index
# (t / precision) % (2 * TIMER_WHEEL_SLOTS) whatever the precision.
#
#     off size field
#       0    8  TIME            t / timerPrecisionMs (a stale slot holds another time)
#       8    8  FIRST_POS       timerlog offset of the slot's first unit, -1 for none
#      16    8  LAST_POS        timerlog offset of its last unit (the chain's head)
#      24    4  NUM             messages parked (cancel marks count -1)
#      28    4  MAGIC           0 (unused)
TIMER_SLOT_TIME_POSITION = 0
TIMER_SLOT_FIRST_POS_POSITION = TIMER_SLOT_TIME_POSITION + 8
TIMER_SLOT_LAST_POS_POSITION = TIMER_SLOT_FIRST_POS_POSITION + 8
TIMER_SLOT_NUM_POSITION = TIMER_SLOT_LAST_POS_POSITION + 8
TIMER_SLOT_MAGIC_POSITION = TIMER_SLOT_NUM_POSITION + 4
TIMER_SLOT_SIZE = TIMER_SLOT_MAGIC_POSITION + 4
assert TIMER_SLOT_SIZE == 8 + 8 + 8 + 4 + 4 == 32
TIMER_WHEEL_TTL_DAYS = 7
TIMER_WHEEL_SLOTS = TIMER_WHEEL_TTL_DAYS * 24 * 3600     # slotsTotal, whatever the precision
TIMER_WHEEL_FILE_SIZE = TIMER_WHEEL_SLOTS * 2 * TIMER_SLOT_SIZE
assert TIMER_WHEEL_FILE_SIZE == 38_707_200
# Slots kept free at the read end of the wheel: a roll window never reaches them.
TIMER_BLANK_SLOTS = 60

# config/timercheck: mapped one OS page long, seven big-endian longs at its start (also the
# body of GET_TIMER_CHECK_POINT).
TIMER_CHECK_LAST_READ_TIME_POSITION = 0
TIMER_CHECK_LAST_TIMERLOG_FLUSH_POSITION = 8
TIMER_CHECK_LAST_QUEUE_OFFSET_POSITION = 16
TIMER_CHECK_MASTER_QUEUE_OFFSET_POSITION = 24
TIMER_CHECK_STATE_VERSION_POSITION = 32
TIMER_CHECK_VERSION_TIMESTAMP_POSITION = 40
TIMER_CHECK_VERSION_COUNTER_POSITION = 48
TIMER_CHECK_ENCODED_SIZE = TIMER_CHECK_VERSION_COUNTER_POSITION + 8
assert TIMER_CHECK_ENCODED_SIZE == 7 * 8 == 56
TIMER_CHECK_FILE_SIZE = 4096
