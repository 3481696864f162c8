# The controller-mode HA wire format (AutoSwitchHA, RocketMQ 5.x): byte layouts and parsing.
"""RocketMQ 5.x's AutoSwitchHA protocol on the master's HA port (controller mode). Raw TCP,
big-endian, every frame starts with the sender's connection state (Java
``HAConnectionState`` ordinal: READY 0, HANDSHAKE 1, TRANSFER 2)::

    slave -> master  handshake  off 0  4  state = HANDSHAKE
                                off 4  2  isSyncFromLastFile (1 = start a fresh slave at the
                                          master's last file, else at its first)
                                off 6  2  isAsyncLearner (1 = never joins the SyncStateSet)
                                off 8  8  slave broker id (the controller's id)
    slave -> master  report     off 0  4  state = TRANSFER
                                off 4  8  slave's max CommitLog offset (request, then acks)
    master -> slave  handshake  off 0  4  state = HANDSHAKE
                                off 4  4  body size = 12 x entries
                                off 8  8  master's max CommitLog offset
                                off 16 4  master's last epoch
                                off 20 .. epoch entries: int epoch, long start offset
    master -> slave  transfer   off 0  4  state = TRANSFER
                                off 4  4  body size (0 = heartbeat)
                                off 8  8  physical offset of the body
                                off 16 4  epoch of the body
                                off 20 8  start offset of that epoch
                                off 28 8  confirm offset (every SyncStateSet member has it)
                                off 36 .. raw CommitLog bytes (never two epochs in one body)

A slave sends its handshake and waits for the master's, cuts its log to the consistent point
of the two epoch lists, then reports its end (the first report is its request) and appends
what follows. Parsing is here (bytes only); the processes that speak it are
``pybroker/proc/autoswitch_master.py`` and ``autoswitch_slave.py``.
"""
import enum
import struct

from pybroker.protocol.ha import HAProtocolError

__all__ = ["ConnectionState", "SLAVE_HANDSHAKE", "SLAVE_REPORT", "MASTER_HANDSHAKE",
           "MASTER_TRANSFER", "EPOCH_ENTRY", "HAProtocolError", "encode_slave_handshake",
           "encode_report", "encode_master_handshake", "encode_transfer_header",
           "parse_slave_frames", "parse_master_header", "parse_epoch_entries",
           "SLAVE_READ_BUFFER_BYTES", "TRANSFER_BODY_MAX_BYTES", "EPOCH_ENTRIES_MAX"]


class ConnectionState(enum.IntEnum):
    """Java's ``HAConnectionState`` (its ordinal is the first word of every frame)."""
    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


SLAVE_HANDSHAKE = struct.Struct(">ihhq")
SLAVE_REPORT = struct.Struct(">iq")
MASTER_HANDSHAKE = struct.Struct(">iiqi")
MASTER_TRANSFER = struct.Struct(">iiqiqq")
EPOCH_ENTRY = struct.Struct(">iq")
assert SLAVE_HANDSHAKE.size == 4 + 4 + 8
assert SLAVE_REPORT.size == 4 + 8
assert MASTER_HANDSHAKE.size == 4 + 4 + 8 + 4
assert MASTER_TRANSFER.size == MASTER_HANDSHAKE.size + 8 + 8
assert EPOCH_ENTRY.size == 12
# Java's buffers: the master reads slave frames into 1 MiB, the slave reads into 4 MiB; the
# master's handshake body holds at most 1000 entries.
SLAVE_READ_BUFFER_BYTES = 4 << 20
TRANSFER_BODY_MAX_BYTES = SLAVE_READ_BUFFER_BYTES - MASTER_TRANSFER.size
EPOCH_ENTRIES_MAX = 1000


def encode_slave_handshake(broker_id: int, sync_from_last_file: bool, async_learner: bool) -> bytes:
    return SLAVE_HANDSHAKE.pack(ConnectionState.HANDSHAKE, int(sync_from_last_file),
                                int(async_learner), broker_id)


def encode_report(max_offset: int) -> bytes:
    if max_offset < 0:
        raise ValueError(f"a report offset must be >= 0, got {max_offset}")
    return SLAVE_REPORT.pack(ConnectionState.TRANSFER, max_offset)


def encode_master_handshake(max_offset: int, last_epoch: int, entries) -> bytes:
    """The master's handshake; ``entries`` are (epoch, start offset) pairs, oldest first."""
    entries = list(entries)[-EPOCH_ENTRIES_MAX:]
    body = b"".join(EPOCH_ENTRY.pack(epoch, start) for epoch, start in entries)
    return MASTER_HANDSHAKE.pack(ConnectionState.HANDSHAKE, len(body), max_offset,
                                 last_epoch) + body


def encode_transfer_header(offset: int, body_bytes: int, epoch: int, epoch_start: int,
                           confirm_offset: int) -> bytes:
    if not 0 <= body_bytes <= TRANSFER_BODY_MAX_BYTES:
        raise ValueError(f"transfer body of {body_bytes} bytes")
    return MASTER_TRANSFER.pack(ConnectionState.TRANSFER, body_bytes, offset, epoch,
                                epoch_start, confirm_offset)


def parse_slave_frames(buffer, end: int) -> tuple[list[tuple], int]:
    """Whole slave frames in ``buffer[:end]``: ``([("handshake", broker_id, from_last_file,
    async_learner) | ("report", offset), ...], consumed)``. HAProtocolError for a state that
    is neither, or a negative offset."""
    frames: list[tuple] = []
    position = 0
    while end - position >= 4:
        state = int.from_bytes(buffer[position:position + 4], "big", signed=True)
        if state == ConnectionState.HANDSHAKE:
            if end - position < SLAVE_HANDSHAKE.size:
                break
            _, last_file, learner, broker_id = SLAVE_HANDSHAKE.unpack_from(buffer, position)
            frames.append(("handshake", broker_id, last_file == 1, learner == 1))
            position += SLAVE_HANDSHAKE.size
        elif state == ConnectionState.TRANSFER:
            if end - position < SLAVE_REPORT.size:
                break
            _, offset = SLAVE_REPORT.unpack_from(buffer, position)
            if offset < 0:
                raise HAProtocolError(f"slave reported a negative offset {offset}")
            frames.append(("report", offset))
            position += SLAVE_REPORT.size
        else:
            raise HAProtocolError(f"slave frame with state {state}: not an AutoSwitchHA slave")
    return frames, position


def parse_master_header(buffer, position: int, available: int):
    """The master frame header at ``position`` when ``available`` bytes hold all of it:
    ``(state, body_bytes, offset, epoch, epoch_start, confirm_offset, header_bytes)`` (the
    last three 0 for a handshake), or None while incomplete. HAProtocolError for anything a
    Java master does not send."""
    if available < MASTER_HANDSHAKE.size:
        return None
    state, body_bytes, offset, epoch = MASTER_HANDSHAKE.unpack_from(buffer, position)
    if state == ConnectionState.HANDSHAKE:
        if body_bytes % EPOCH_ENTRY.size or not 0 <= body_bytes <= \
                EPOCH_ENTRIES_MAX * EPOCH_ENTRY.size:
            raise HAProtocolError(f"master handshake body of {body_bytes} bytes")
        return state, body_bytes, offset, epoch, 0, 0, MASTER_HANDSHAKE.size
    if state != ConnectionState.TRANSFER:
        raise HAProtocolError(f"master frame with state {state}: not an AutoSwitchHA master")
    if available < MASTER_TRANSFER.size:
        return None
    _, _, _, _, epoch_start, confirm = MASTER_TRANSFER.unpack_from(buffer, position)
    if not 0 <= body_bytes <= TRANSFER_BODY_MAX_BYTES:
        raise HAProtocolError(f"master sent a transfer of {body_bytes} bytes")
    if body_bytes and offset < 0:
        raise HAProtocolError(f"master sent data at a negative offset {offset}")
    return state, body_bytes, offset, epoch, epoch_start, confirm, MASTER_TRANSFER.size


def parse_epoch_entries(body) -> list[tuple[int, int]]:
    """(epoch, start offset) pairs of a master handshake body."""
    return [EPOCH_ENTRY.unpack_from(body, index)
            for index in range(0, len(body) - len(body) % EPOCH_ENTRY.size, EPOCH_ENTRY.size)]
