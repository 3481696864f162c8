# Plain struct/zlib CommitLog record code: the baseline the Cython record codec is measured against.
"""A straightforward Python CommitLog record encoder, scanner and Java hash (benchmarks only).

Written the way one would without Cython: struct for the fixed fields, zlib for the CRC. It
encodes the same bytes as pybroker._fast.record (the benchmark checks that before timing).
"""
import struct
import zlib

MAGIC_V1 = 0xDAA320A7 - (1 << 32)
_HEAD = struct.Struct(">iiiiiqqiq")        # size, magic, crc, queue id, flag, offsets, sys, born
_HOST_V4 = struct.Struct(">4si")
_MIDDLE = struct.Struct(">q")
_TAIL = struct.Struct(">iqi")               # reconsume, prepared offset, body length
_SIZE_MAGIC = struct.Struct(">ii")


def encode_into(buf, offset, topic, queue_id, flag, body, properties, sys_flag, born_timestamp,
                born_host, born_port, store_host, store_port, reconsume_times=0,
                prepared_transaction_offset=0, queue_offset=0, physical_offset=0,
                store_timestamp=0):
    """IPv4 hosts and topics up to 127 bytes only: enough for the benchmark."""
    total = 91 + len(body) + len(topic) + len(properties)
    crc = zlib.crc32(body) & 0x7FFFFFFF
    at = offset
    _HEAD.pack_into(buf, at, total, MAGIC_V1, crc, queue_id, flag, queue_offset,
                    physical_offset, sys_flag, born_timestamp)
    at += _HEAD.size
    _HOST_V4.pack_into(buf, at, born_host, born_port)
    _MIDDLE.pack_into(buf, at + 8, store_timestamp)
    _HOST_V4.pack_into(buf, at + 16, store_host, store_port)
    _TAIL.pack_into(buf, at + 24, reconsume_times, prepared_transaction_offset, len(body))
    at += 40
    buf[at:at + len(body)] = body
    at += len(body)
    buf[at] = len(topic)
    buf[at + 1:at + 1 + len(topic)] = topic
    at += 1 + len(topic)
    struct.pack_into(">h", buf, at, len(properties))
    buf[at + 2:at + 2 + len(properties)] = properties
    return total


def scan(buf, start, end, check_crc):
    """Walk whole v1/IPv4 records; returns (position, count) where the walk stopped."""
    view = memoryview(buf)
    at, count = start, 0
    while end - at >= 8:
        total, magic = _SIZE_MAGIC.unpack_from(buf, at)
        if total <= 0 or magic != MAGIC_V1 or at + total > end:
            break
        (body_length,) = struct.unpack_from(">i", buf, at + 84)
        topic_length = buf[at + 88 + body_length]
        (properties_length,) = struct.unpack_from(">h", buf, at + 89 + body_length + topic_length)
        if 91 + body_length + topic_length + properties_length != total:
            break
        if check_crc:
            (crc,) = struct.unpack_from(">i", buf, at + 8)
            if zlib.crc32(view[at + 88:at + 88 + body_length]) & 0x7FFFFFFF != crc:
                break
        at += total
        count += 1
    return at, count


def java_hash(text: str) -> int:
    """Java String.hashCode over UTF-16 code units."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h
