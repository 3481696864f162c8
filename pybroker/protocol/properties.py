# Message properties string codec (name \x01 value \x02 ...) and the broker's property helpers.
"""RocketMQ message properties as a string (protocol.md §3.2).

Each pair is written as ``name \\x01 value \\x02``, the pair separator included after the last
pair. Decoding follows Java's ``MessageDecoder.string2messageProperties`` tolerance rules, so a
string any client can produce decodes the way the Java broker would decode it.
"""
from collections.abc import Mapping

from pybroker.protocol.constants import (KEY_SEPARATOR, NAME_VALUE_SEPARATOR,
                                         PROPERTY_SEPARATOR, Property)

# Java skips segments shorter than "k\x01v".
_SEGMENT_LENGTH_MIN = 3
_PROPERTY_SEPARATOR_BYTES = PROPERTY_SEPARATOR.encode()


def encode_properties(properties: Mapping[str, str | None]) -> str:
    """Encode ``{name: value}`` as a properties string; pairs whose value is None are skipped."""
    return "".join([f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
                    for name, value in properties.items() if value is not None])


def decode_properties(text: str) -> dict[str, str]:
    """Decode a properties string the way Java does.

    Segments are split on ``\\x02`` (a missing trailing one is fine). A segment shorter than 3
    characters is skipped, as is one whose first ``\\x01`` is its first or last character or
    absent. The value keeps any later ``\\x01``. A repeated name keeps its last value.
    """
    properties: dict[str, str] = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        if len(segment) < _SEGMENT_LENGTH_MIN:
            continue
        name_end = segment.find(NAME_VALUE_SEPARATOR)
        if 0 < name_end < len(segment) - 1:
            properties[segment[:name_end]] = segment[name_end + 1:]
    return properties


def tags_of(properties: dict[str, str]) -> str | None:
    """The message tag (``TAGS``), or None when absent."""
    return properties.get(Property.TAGS)


def keys_of(properties: dict[str, str]) -> list[str]:
    """The user keys (``KEYS``, space separated), empty entries skipped, in order."""
    keys = properties.get(Property.KEYS)
    if not keys:
        return []
    return [key for key in keys.split(KEY_SEPARATOR) if key]


def uniq_key_of(properties: dict[str, str]) -> str | None:
    """The client unique message id (``UNIQ_KEY``), or None when absent."""
    return properties.get(Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


def append_batch_properties(inner, batch):
    """Append a batch's properties to one inner message's properties (protocol.md §3.6).

    Works on ``str`` or on UTF-8 ``bytes`` (both arguments the same type). A ``\\x02`` is
    inserted between them only when both are non-empty and ``inner`` does not already end with
    one, as the Java broker does when it stores a batch.
    """
    separator = PROPERTY_SEPARATOR if isinstance(inner, str) else _PROPERTY_SEPARATOR_BYTES
    if not batch:
        return inner
    if inner and not inner.endswith(separator):
        return inner + separator + batch
    return inner + batch
