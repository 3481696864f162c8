# Lenient JSON reader for documents written by Java's fastjson (bare object keys).
"""Read JSON as Java RocketMQ writes it with fastjson.

fastjson writes non-string map keys without quotes (``{"offsetTable":{"T@G":{0:120,1:118}}}``)
and, for maps keyed by beans, object-valued keys (``{{"topic":"T","queueId":0}:5}``).
Standard parsers reject both. :func:`loads` first tries orjson (the common, standard case); on
failure it repairs the text with a tokenizer that quotes bare keys **only at key positions
outside strings** and parses again.

Object-valued keys become string keys holding the key object's compact JSON with sorted keys
(``'{"queueId":0,"topic":"T"}'``), so callers can ``orjson.loads`` them back.
"""
import re

import orjson

__all__ = ["loads", "DOCUMENT_SIZE_MAX_BYTES", "DEPTH_MAX"]

DOCUMENT_SIZE_MAX_BYTES = 256 * 1024 * 1024   # consumerOffset.json of a very large broker fits
DEPTH_MAX = 128                               # fastjson documents nest a handful of levels

# One token per match: a complete string, one structural character, whitespace, or a bare run
# (number, literal or unquoted key). A lone '"' (unterminated string) is matched as an error.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|\s+|[^\s{}\[\]:,"]+|"', re.DOTALL)
# Bare keys we accept: numbers (fastjson's int/long keys) and Java identifiers.
_BARE_KEY = re.compile(r"-?[0-9]+|[A-Za-z_$][A-Za-z0-9_$]*")
_OBJECT, _ARRAY, _KEY_OBJECT = 0, 1, 2


def loads(data, *, size_max_bytes: int = DOCUMENT_SIZE_MAX_BYTES, depth_max: int = DEPTH_MAX):
    """Parse JSON text (bytes, bytearray, memoryview or str), accepting fastjson's bare keys.

    ``size_max_bytes`` bounds the input size in bytes (characters for ``str``), ``depth_max``
    the nesting depth of the repaired path. Raises ``ValueError`` for anything that is not JSON
    after repair, or that exceeds a bound.
    """
    if isinstance(data, memoryview):
        size = data.nbytes
    else:
        size = len(data)
    if size > size_max_bytes:
        raise ValueError(f"JSON document of {size} bytes exceeds the limit of {size_max_bytes}")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"JSON document is not valid UTF-8: {error}") from None
    repaired = _quote_bare_keys(text, depth_max)
    try:
        return orjson.loads(repaired)
    except orjson.JSONDecodeError as error:
        raise ValueError(f"not a JSON document even with fastjson leniency: {error}") from None


class _Repair:
    """Tokenizer state: output pieces and a stack of open containers."""

    __slots__ = ("pieces", "stack", "expect_key", "key_object_starts", "depth_max")

    def __init__(self, depth_max: int):
        self.pieces: list[str] = []
        self.stack: list[int] = []
        self.expect_key = False       # next token in the current object is a key
        self.key_object_starts: list[int] = []   # index in pieces where a key object began
        self.depth_max = depth_max

    def open(self, kind: int, piece: str) -> None:
        if len(self.stack) >= self.depth_max:
            raise ValueError(f"JSON nesting deeper than {self.depth_max}")
        if kind == _KEY_OBJECT:
            self.key_object_starts.append(len(self.pieces))
        self.stack.append(kind)
        self.pieces.append(piece)
        self.expect_key = kind != _ARRAY

    def close(self, token: str, position: int) -> None:
        if not self.stack:
            raise ValueError(f"unbalanced {token!r} at character {position}")
        kind = self.stack.pop()
        if (token == "]") != (kind == _ARRAY):
            raise ValueError(f"mismatched {token!r} at character {position}")
        self.pieces.append(token)
        self.expect_key = False
        if kind == _KEY_OBJECT:
            self._finish_key_object()

    def _finish_key_object(self) -> None:
        start = self.key_object_starts.pop()
        key_text = "".join(self.pieces[start:])
        try:
            key_value = orjson.loads(key_text)
        except orjson.JSONDecodeError as error:
            raise ValueError(f"bad object-valued key {key_text[:80]!r}: {error}") from None
        del self.pieces[start:]
        compact = orjson.dumps(key_value, option=orjson.OPT_SORT_KEYS).decode("utf-8")
        self.pieces.append(orjson.dumps(compact).decode("utf-8"))


def _quote_bare_keys(text: str, depth_max: int) -> str:
    """Return ``text`` with bare and object-valued keys turned into JSON strings."""
    state = _Repair(depth_max)
    for match in _TOKEN.finditer(text):
        token = match.group()
        first = token[0]
        if first == "{":
            state.open(_KEY_OBJECT if _at_key(state) else _OBJECT, token)
        elif first == "[":
            if _at_key(state):
                raise ValueError(f"array used as an object key at character {match.start()}")
            state.open(_ARRAY, token)
        elif first in "}]":
            state.close(token, match.start())
        elif first == ",":
            state.expect_key = bool(state.stack) and state.stack[-1] != _ARRAY
            state.pieces.append(token)
        elif first == ":" or first.isspace():
            state.pieces.append(token)
        elif first == '"':
            if len(token) == 1:
                raise ValueError(f"unterminated string at character {match.start()}")
            state.expect_key = False
            state.pieces.append(token)
        elif _at_key(state):
            if _BARE_KEY.fullmatch(token) is None:
                raise ValueError(f"unexpected bare key {token[:40]!r} at character "
                                 f"{match.start()}")
            state.expect_key = False
            state.pieces.append('"' + token + '"')
        else:
            state.pieces.append(token)   # number or literal: orjson validates it
    if state.stack:
        raise ValueError("JSON document ends inside an open object or array")
    return "".join(state.pieces)


def _at_key(state: _Repair) -> bool:
    return state.expect_key and bool(state.stack) and state.stack[-1] != _ARRAY
