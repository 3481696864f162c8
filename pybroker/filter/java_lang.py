# The few java.lang behaviours RocketMQ's SQL92 filter depends on, written from their specs.
"""Java value semantics for the SQL92 filter: number parsing, comparison, printing.

The Java broker evaluates selectors over ``java.lang`` values (String properties, Integer, Long
and Double constants, Boolean) and its answers depend on those classes' exact rules: which
strings ``Integer.valueOf`` or ``Double.valueOf`` accept, how ``Double.compareTo`` orders NaN
and -0.0, how ``String.compareTo`` orders UTF-16 code units, how ``Double.toString`` prints.
Each function here implements one such rule from the Java SE API specification.

Values are modelled as: ``str`` (String), ``bool`` (Boolean), :class:`JInt` (Integer),
:class:`JLong` (Long), ``float`` (Double) and ``None`` (null).
"""
import math
import re

from pybroker._fast.jhash import java_hash

__all__ = ["JInt", "JLong", "JavaError", "parse_int", "parse_long", "parse_double",
           "double_to_string", "to_java_string", "java_compare", "java_equals",
           "string_compare", "hash_order", "hash_set_order", "put_order", "guava_set_order",
           "add_escapes", "INT_MIN", "INT_MAX",
           "LONG_MIN", "LONG_MAX"]

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
DOUBLE_MIN_VALUE = 5e-324            # Double.MIN_VALUE, printed "4.9E-324"
DOUBLE_MAX_VALUE = 1.7976931348623157e308


class JavaError(Exception):
    """A Java exception: ``java_class`` (fully qualified) and its message (may be None).

    ``str()`` is Java's ``Throwable.toString()``: ``class`` or ``class: message``.
    """

    def __init__(self, java_class: str, message: str | None = None):
        super().__init__(java_class, message)
        self.java_class = java_class
        self.message = message

    def __str__(self) -> str:
        if self.message is None:
            return self.java_class
        return f"{self.java_class}: {self.message}"


def runtime_error(message: str) -> JavaError:
    return JavaError("java.lang.RuntimeException", message)


def number_format_error(text: str) -> JavaError:
    return JavaError("java.lang.NumberFormatException", f'For input string: "{text}"')


class JInt(int):
    """A java.lang.Integer (its class matters for comparisons)."""
    __slots__ = ()


class JLong(int):
    """A java.lang.Long."""
    __slots__ = ()


# Character.digit(c, 10) accepts every Unicode decimal digit (category Nd); so does re's \d.
_JAVA_INTEGER = re.compile(r"[+-]?\d+")


def _parse_integer(text: str, low: int, high: int) -> int:
    if _JAVA_INTEGER.fullmatch(text) is None:
        raise number_format_error(text)
    value = int(text)
    if not low <= value <= high:
        raise number_format_error(text)
    return value


def parse_int(text: str) -> JInt:
    """``Integer.valueOf(text)``; JavaError (NumberFormatException) when it does not parse."""
    return JInt(_parse_integer(text, INT_MIN, INT_MAX))


def parse_long(text: str) -> JLong:
    """``Long.valueOf(text)``; JavaError (NumberFormatException) when it does not parse."""
    return JLong(_parse_integer(text, LONG_MIN, LONG_MAX))


# FloatingDecimal.readJavaFormatString: optional sign, NaN/Infinity, decimal with optional
# exponent and f/F/d/D suffix (ASCII digits only), or a hexadecimal float with its binary exponent.
_JAVA_DECIMAL = re.compile(
    r"([+-]?)(?:(NaN)|(Infinity)|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?)",
    re.ASCII)
_JAVA_HEX = re.compile(
    r"([+-]?)0[xX]([0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP]([+-]?[0-9]+)[fFdD]?",
    re.ASCII)


def _java_trim(text: str) -> str:
    # String.trim removes every leading/trailing char <= U+0020.
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


_PLAIN_START = frozenset("0123456789+-.")
_PLAIN_END = frozenset("0123456789.")


def parse_double(text: str) -> float:
    """``Double.valueOf(text)``; JavaError (NumberFormatException) when it does not parse."""
    # Fast path: an ASCII text that starts with a sign, digit or point and ends with a digit or
    # point (so no spaces, no inf/nan words, no suffix) parses alike in Python and Java, unless
    # it has an underscore, which only Python accepts.
    if text and text[0] in _PLAIN_START and text[-1] in _PLAIN_END and text.isascii() \
            and "_" not in text:
        try:
            return float(text)
        except ValueError:
            pass
    trimmed = _java_trim(text)
    found = _JAVA_DECIMAL.fullmatch(trimmed)
    if found is not None:
        sign = -1.0 if found.group(1) == "-" else 1.0
        if found.group(2):
            return math.nan
        if found.group(3):
            return sign * math.inf
        return sign * float(found.group(4))
    found = _JAVA_HEX.fullmatch(trimmed)
    if found is not None:
        sign = -1.0 if found.group(1) == "-" else 1.0
        try:
            return sign * float.fromhex(f"0x{found.group(2)}p{found.group(3)}")
        except OverflowError:
            return sign * math.inf
    message = "empty String" if not trimmed else f'For input string: "{text}"'
    raise JavaError("java.lang.NumberFormatException", message)


def double_to_string(value: float) -> str:
    """``Double.toString(value)``: decimal for 1e-3 <= |v| < 1e7, else d.dddE<n>."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0.0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent_text = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # Decimal exponent of the first significant digit.
    exponent = int(exponent_text or 0) + len(whole) - 1
    if whole == "0":
        exponent = int(exponent_text or 0) - (len(fraction) - len(fraction.lstrip("0"))) - 1
    digits = digits.rstrip("0") or "0"
    if len(digits) == 1:
        # Java prints at least two significant digits and picks the two closest to the value
        # (Double.MIN_VALUE is "4.9E-324", where the shortest repr is 5e-324).
        two = f"{abs(value):.1e}"
        if two[2] != "0":
            digits, exponent = two[0] + two[2], int(two[4:])
    if -3 <= exponent < 7:
        if exponent >= 0:
            integer = digits[:exponent + 1].ljust(exponent + 1, "0")
            rest = digits[exponent + 1:] or "0"
            return f"{sign}{integer}.{rest}"
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def to_java_string(value) -> str:
    """``String.valueOf(value)`` of a filter value (as ``%s`` formats it)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is float:
        return double_to_string(value)
    return str(int(value)) if isinstance(value, int) else value


def _utf16(text: str) -> bytes:
    return text.encode("utf-16-be", "surrogatepass")


def string_compare(left: str, right: str) -> int:
    """``String.compareTo``: UTF-16 code units in order, then length (sign only)."""
    if left == right:
        return 0
    if left.isascii() and right.isascii() or max(left + right) < "\U00010000":
        return -1 if left < right else 1
    return -1 if _utf16(left) < _utf16(right) else 1


def _double_compare(left: float, right: float) -> int:
    # Double.compare: numeric order, -0.0 < 0.0, NaN equal to itself and above everything.
    if left < right:
        return -1
    if left > right:
        return 1
    left_nan, right_nan = math.isnan(left), math.isnan(right)
    if left_nan or right_nan:
        return (left_nan > right_nan) - (left_nan < right_nan)
    left_sign, right_sign = math.copysign(1.0, left), math.copysign(1.0, right)
    return (left_sign > right_sign) - (left_sign < right_sign)


def _same_class_compare(left, right) -> int:
    kind = type(left)
    if kind is str:
        return string_compare(left, right)
    if kind is float:
        return _double_compare(left, right)
    return (left > right) - (left < right)   # Integer, Long, Boolean (false < true)


# The JDK 17 message of the ClassCastException Java's comparison throws for Boolean vs String.
_BOOLEAN_TO_STRING_CAST = ("class java.lang.Boolean cannot be cast to class java.lang.String "
                           "(java.lang.Boolean and java.lang.String are in module java.base of "
                           "loader 'bootstrap')")
_FROM_STRING = {JInt: parse_int, JLong: parse_long, float: parse_double}


def _promote(left, right):
    """ComparisonExpression.__compare's conversions for two classes (convert strings on).
    Returns the converted pair, or None when Java answers -1 without comparing."""
    left_class, right_class = type(left), type(right)
    if left_class is bool:
        if right_class is str:
            # Java casts the Boolean to String here: a ClassCastException it does not catch.
            raise JavaError("java.lang.ClassCastException", _BOOLEAN_TO_STRING_CAST)
        return None
    if left_class is str:
        if right_class is bool:
            return left.lower() == "true", right
        return _FROM_STRING[right_class](left), right
    if right_class is str:
        return left, _FROM_STRING[left_class](right)
    if right_class is bool:
        return None
    if left_class is float or right_class is float:
        return float(left), float(right)
    return int(left), int(right)   # Integer and Long: both become long


def java_compare(left, right) -> int:
    """``ComparisonExpression.__compare(left, right, true)``: -1, 0 or 1.

    JavaError for a string that does not convert (wrapped NumberFormatException, as Java
    wraps it) or for Java's uncaught ClassCastException (Boolean compared with a String).
    """
    if type(left) is type(right):
        return _same_class_compare(left, right)
    try:
        pair = _promote(left, right)
    except JavaError as error:
        if error.java_class == "java.lang.NumberFormatException":
            raise JavaError("java.lang.RuntimeException", str(error)) from None
        raise
    if pair is None:
        return -1
    return _same_class_compare(*pair)


def java_equals(left, right) -> bool:
    """``left.equals(right)`` for filter values (same class and value; Double by bits)."""
    if type(left) is not type(right):
        return False
    if type(left) is float:
        return _double_compare(left, right) == 0
    return left == right


def hash_order(items, capacity: int) -> list[str]:
    """Iteration order of a Java (8+) HashMap or HashSet whose table has ``capacity`` buckets
    (a power of two) and holds the distinct strings ``items``, put in that order: by bucket
    (the spread String hash masked to the table), insertion order within a bucket."""
    assert capacity > 0 and capacity & (capacity - 1) == 0, capacity
    buckets: dict[int, list[str]] = {}
    for item in items:
        code = java_hash(item) & 0xFFFFFFFF
        buckets.setdefault((code ^ (code >> 16)) & (capacity - 1), []).append(item)
    return [item for index in sorted(buckets) for item in buckets[index]]


def _table_size_for(wanted: int) -> int:
    capacity = 1
    while capacity < wanted:
        capacity <<= 1
    return capacity


def hash_set_order(items: list[str]) -> list[str]:
    """Iteration order of ``new HashSet<>(items)`` (capacity the power of two
    >= max(n / 0.75 + 1, 16))."""
    unique = list(dict.fromkeys(items))
    return hash_order(unique, _table_size_for(max(int(len(items) / 0.75) + 1, 16)))


def put_order(items: list[str]) -> list[str]:
    """Iteration order of ``new HashMap<>()`` after putting the distinct strings ``items`` in
    that order (the table starts at 16 buckets and doubles when the size passes 3/4 of it)."""
    capacity = 16
    while len(items) > capacity * 3 // 4:
        capacity <<= 1
    return hash_order(items, capacity)


def guava_set_order(items: list[str]) -> list[str]:
    """Iteration order of Guava 32's ``Sets.newHashSet(items...)`` (sized for the expected
    count: n + 1 below 3, else ceil(n / 0.75), rounded up to a power of two)."""
    wanted = len(items) + 1 if len(items) < 3 else math.ceil(len(items) / 0.75)
    return hash_order(list(dict.fromkeys(items)), _table_size_for(wanted))


_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"',
            "'": "\\'", "\\": "\\\\"}


def add_escapes(text: str) -> str:
    """JavaCC's addEscapes over UTF-16 units: NUL dropped, C escapes, others as \\uXXXX."""
    out = []
    for unit in java_chars(text):
        if unit == "\0":
            continue
        escaped = _ESCAPES.get(unit)
        if escaped is not None:
            out.append(escaped)
        elif unit < " " or unit > "~":
            out.append(f"\\u{ord(unit):04x}")
        else:
            out.append(unit)
    return "".join(out)


def _split_surrogates(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if code < 0x10000:
            out.append(char)
        else:
            code -= 0x10000
            out.append(chr(0xD800 + (code >> 10)) + chr(0xDC00 + (code & 0x3FF)))
    return "".join(out)


def java_chars(text: str) -> str:
    """``text`` as Java sees it: one Python character per UTF-16 code unit."""
    return _split_surrogates(text) if max(text, default="\0") >= "\U00010000" else text


def from_java_chars(text: str) -> str:
    """Join surrogate pairs back into characters (lone surrogates stay)."""
    if not any("\ud800" <= char <= "\udfff" for char in text):
        return text
    return _utf16(text).decode("utf-16-be", "surrogatepass")
