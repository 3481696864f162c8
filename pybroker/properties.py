# Java Properties syntax: broker.conf, namesrv.conf, tls.properties and the settings bodies.
"""Reading and writing Java ``.properties`` text exactly as ``java.util.Properties`` does:
comments, the three separators, line continuations and escapes (``\\uXXXX``, surrogate
pairs). :mod:`pybroker.config` reads every configuration file through it; the admin requests
that carry settings (UPDATE_BROKER_CONFIG, UPDATE_NAMESRV_CONFIG) use the same rules."""
import os
import re

from pybroker.errors import ConfigError

__all__ = ["load_properties", "parse_properties", "properties_line"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")   # Java's only line terminators (not \x85, \u2028)
_WHITESPACE = " \t\f"
_ESCAPED = {"t": "\t", "r": "\r", "n": "\n", "f": "\f"}


def load_properties(path: str | os.PathLike) -> dict[str, str]:
    """Read a Java ``.properties`` file into {key: value}; the last duplicate wins.

    Bytes are decoded as ISO-8859-1 exactly like Java's ``Properties.load(InputStream)``
    (other characters must be written as ``\\uXXXX``). Raises ``OSError`` for an unreadable
    file and :class:`ConfigError` for a malformed ``\\u`` escape.
    """
    with open(path, "rb") as stream:
        text = stream.read().decode("iso-8859-1")
    return parse_properties(text, source=os.fspath(path))


def parse_properties(text: str, source: str = "<text>") -> dict[str, str]:
    """Parse Java Properties text: ``#``/``!`` comments, ``=``/``:``/whitespace separators,
    backslash line continuation, ``\\uXXXX`` and ``\\t \\n \\r \\f`` escapes."""
    entries: dict[str, str] = {}
    for number, logical in _logical_lines(text):
        raw_key, raw_value = _split_key_value(logical)
        try:
            entries[_unescape(raw_key)] = _unescape(raw_value)
        except ValueError as error:
            raise ConfigError(f"{source}:{number}: {error}") from None
    return entries


def _logical_lines(text: str):
    """Yield (first line number, logical line) with continuations joined, comments dropped."""
    pending: str | None = None
    start = 0
    for number, line in enumerate(_LINE_BREAK.split(text), 1):
        if pending is None:
            current = line.lstrip(_WHITESPACE)
            if not current or current[0] in "#!":
                continue   # blank or comment; a comment never continues
            start = number
        else:
            # A continuation line's leading whitespace is dropped; '#' there is data.
            current = pending + line.lstrip(_WHITESPACE)
        trailing = len(current) - len(current.rstrip("\\"))
        if trailing % 2 == 1:   # an odd count: the last backslash joins the next line
            pending = current[:-1]
            continue
        pending = None
        yield start, current
    if pending is not None:
        yield start, pending   # continuation at end of file: Java drops the backslash


def _split_key_value(line: str) -> tuple[str, str]:
    """Java's rule: the key ends at the first unescaped '=', ':' or whitespace; then
    whitespace and at most one '=' or ':' are skipped before the value."""
    position, escaped, separated = 0, False, False
    while position < len(line):
        char = line[position]
        if not escaped and char in "=:":
            separated = True
            break
        if not escaped and char in _WHITESPACE:
            break
        escaped = char == "\\" and not escaped
        position += 1
    key = line[:position]
    position += 1
    while position < len(line):
        char = line[position]
        if char in _WHITESPACE:
            position += 1
        elif char in "=:" and not separated:
            separated = True
            position += 1
        else:
            break
    return key, line[position:]


def _unescape(raw: str) -> str:
    if "\\" not in raw:
        return raw
    out, position = [], 0
    while position < len(raw):
        char = raw[position]
        position += 1
        if char != "\\":
            out.append(char)
        elif position < len(raw) and raw[position] == "u":
            digits = raw[position + 1:position + 5]
            if not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                raise ValueError("Malformed \\uxxxx encoding: \\u" + digits)
            out.append(chr(int(digits, 16)))
            position += 5
        elif position < len(raw):
            out.append(_ESCAPED.get(raw[position], raw[position]))   # \x -> x
            position += 1
    # Java strings are UTF-16: join escaped surrogate pairs into one code point.
    return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le",
                                                                     "surrogatepass")


def properties_line(key: str, value: str) -> str:
    """``key=value`` escaped so that :func:`parse_properties` reads back the same pair."""
    def escape(text: str, is_key: bool) -> str:
        out = []
        for index, char in enumerate(text):
            if char == "\\":
                out.append("\\\\")
            elif char in "\t\n\r\f":
                out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[char])
            elif (is_key and char in "=: #!") or (char == " " and index == 0):
                out.append("\\" + char)
            elif ord(char) < 0x20 or ord(char) > 0xFF:
                units = char.encode("utf-16-be", "surrogatepass")
                out.extend(f"\\u{units[i]:02X}{units[i + 1]:02X}"
                           for i in range(0, len(units), 2))
            else:
                out.append(char)
        return "".join(out)
    return escape(key, True) + "=" + escape(value, False)
