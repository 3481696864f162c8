# How a setting is declared: the schema language of pybroker/config.py and store/settings.py.
"""Declaring settings: :func:`setting` makes a dataclass field a setting with its RocketMQ key,
Java's default, unit, validator (:class:`Rule`) and ``important`` flag; :func:`settings_of` reads
the declarations back as :class:`SettingSpec`; :func:`parse_value` turns broker.conf text into
the setting's type and checks its rule.

The areas themselves are declared where they belong (``pybroker.config`` for broker, remoting
and NameServer settings, ``pybroker.store.settings`` for the store) and composed into one
schema by :mod:`pybroker.config`, which also loads files.
"""
import dataclasses
import enum
import ipaddress
import os
import re
from typing import Any, Callable

from pybroker.errors import ConfigError

JAVA_INT_MIN, JAVA_INT_MAX = -(1 << 31), (1 << 31) - 1
JAVA_LONG_MIN, JAVA_LONG_MAX = -(1 << 63), (1 << 63) - 1
DELAY_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def java_text(value: Any) -> str:
    """A value as broker.conf spells it: true/false, enum names, '' for "not set"."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --- validators ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Rule:
    """A validator: ``check(value)`` is true for allowed values; ``text`` states the rule."""
    text: str
    check: Callable[[Any], bool]


def between(low: float, high: float) -> Rule:
    """Inclusive range, in the setting's unit."""
    return Rule(f"must be between {low} and {high}", lambda value: low <= value <= high)


def at_least(low: float) -> Rule:
    """Lower bound, inclusive, in the setting's unit."""
    return Rule(f"must be >= {low}", lambda value: value >= low)


def matches(pattern: str, text: str) -> Rule:
    """The whole string matches ``pattern``; ``text`` says so in words."""
    compiled = re.compile(pattern)
    return Rule(text, lambda value: compiled.fullmatch(value) is not None)


def only(allowed: Any, why: str) -> Rule:
    """A Java setting whose other values pybroker does not implement."""
    return Rule(f"must be {java_text(allowed)} ({why})", lambda value: value == allowed)


def power_of_two(low: int, high: int) -> Rule:
    """A power of two within [low, high] (ring sizes: index by mask)."""
    return Rule(f"must be a power of two between {low} and {high}",
                lambda value: low <= value <= high and value & (value - 1) == 0)


_ADDRESS = r"[A-Za-z0-9._-]+:[0-9]{1,5}"
ADDRESS_RULE = Rule("must be host:port with port 1..65535", lambda value: _address_ok(value))
ADDRESS_LIST_RULE = Rule("must be host:port[;host:port...] with ports 1..65535",
                         lambda value: all(_address_ok(part) for part in value.split(";")))
NAME_RULE = matches(r"[A-Za-z0-9_.%|-]{1,127}",
                    "must be 1..127 of letters, digits and . _ - % |")
HOST_RULE = matches(r"[A-Za-z0-9._-]{1,255}", "must be an IPv4 address or a host name")
DELETE_WHEN_RULE = Rule("must be hours 0..23 separated by ';', e.g. 04 or 04;16",
                        lambda value: delete_when_hours(value) is not None)
DELAY_LEVEL_RULE = Rule("must be 1 or more space-separated durations like 1s 5m 2h 1d",
                        lambda value: _delay_levels_ok(value))
NETWORK_LIST_RULE = Rule("must be IP addresses or CIDR networks separated by ','",
                         lambda value: parse_networks(value) is not None)
PORT_RULE = between(1, 65535)
PERCENT_RULE = between(0, 100)


def parse_networks(text: str) -> tuple | None:
    """IP addresses / CIDR networks separated by ',' (an address is a one-host network), or
    None when a part is neither. Empty text: ()."""
    try:
        return tuple(ipaddress.ip_network(part.strip(), strict=False)
                     for part in text.split(",") if part.strip())
    except ValueError:
        return None


def _address_ok(text: str) -> bool:
    return re.fullmatch(_ADDRESS, text) is not None and 1 <= int(text.rsplit(":", 1)[1]) <= 65535


def delete_when_hours(text: str) -> tuple[int, ...] | None:
    """``deleteWhen`` ("04" or "04;16") -> the hours, or None when it is not such a list."""
    parts = text.split(";")
    if not all(re.fullmatch(r"[0-9]{1,2}", part) and int(part) < 24 for part in parts):
        return None
    return tuple(int(part) for part in parts)


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``messageDelayLevel`` ("1s 5s ... 2h", Java's schedule service) -> delay of level 1, 2,
    ... in ms.

    ValueError on an item that is not a positive number followed by s, m, h or d.
    """
    levels = []
    for item in text.split():
        found = re.fullmatch(r"([0-9]{1,9})([smhd])", item)
        if found is None or int(found.group(1)) == 0:
            raise ValueError(f"messageDelayLevel item {item!r} is not like '5s', '1m', '2h'")
        levels.append(int(found.group(1)) * DELAY_UNIT_MS[found.group(2)])
    if not levels:
        raise ValueError("messageDelayLevel names no level")
    return tuple(levels)


def _delay_levels_ok(text: str) -> bool:
    try:
        parse_delay_levels(text)
    except ValueError:
        return False
    return True


# --- declaring a setting ------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SettingSpec:
    """One setting: everything the schema knows about it."""
    key: str              # RocketMQ (or pybroker-only) broker.conf key
    attribute: str        # Python attribute: snake_case of key
    kind: str             # "str", "int" (Java int), "long", "bool", "float" or "enum"
    default: Any          # Java's default; a callable is evaluated at load (host name, CPUs)
    unit: str             # "ms", "s", "hours", "bytes", "MB/s", "pages", "count", "percent", ""
    doc: str
    rule: Rule | None
    important: bool
    pybroker_only: bool
    optional: bool        # None allowed ("not set")
    enum_type: type[enum.Enum] | None
    secret: bool = False  # a password: never listed, logged or answered (GET_BROKER_CONFIG)


def setting(key: str, default: Any, doc: str, *, unit: str = "", rule: Rule | None = None,
            important: bool = False, long: bool = False, pybroker_only: bool = False,
            secret: bool = False) -> Any:
    """Declare a dataclass field as a setting; ``default`` may be a zero-argument callable.
    ``secret``: the value is never listed (``pybroker config``, GET_BROKER_CONFIG, logs)."""
    meta = {"key": key, "doc": doc, "unit": unit, "rule": rule, "important": important,
            "long": long, "pybroker_only": pybroker_only, "default": default,
            "secret": secret}
    if callable(default):
        return dataclasses.field(default_factory=default, metadata=meta, repr=not secret)
    return dataclasses.field(default=default, metadata=meta, repr=not secret)


def _snake(key: str) -> str:
    # Java's system-property style keys (tls.server.keyPath) become tls_server_key_path.
    return re.sub(r"(?<=[a-z0-9])([A-Z])|(?<=[A-Z])([A-Z])(?=[a-z])",
                  lambda found: "_" + found.group(0), key).lower().replace(".", "_")


def _spec_of(field: dataclasses.Field) -> SettingSpec:
    meta, annotation = field.metadata, field.type
    optional = annotation == str | None
    enum_type = annotation if isinstance(annotation, type) and issubclass(
        annotation, enum.Enum) else None
    if enum_type is not None:
        kind = "enum"
    elif annotation is bool:
        kind = "bool"
    elif annotation is int:
        kind = "long" if meta["long"] else "int"
    elif annotation is float:
        kind = "float"
    else:
        assert annotation is str or optional, (field.name, annotation)
        kind = "str"
    # One setting, one name: the attribute is always the key in snake_case.
    assert _snake(meta["key"]) == field.name, (meta["key"], field.name)
    return SettingSpec(meta["key"], field.name, kind, meta["default"], meta["unit"], meta["doc"],
                       meta["rule"], meta["important"], meta["pybroker_only"], optional,
                       enum_type, meta.get("secret", False))


def settings_of(area: type) -> tuple[SettingSpec, ...]:
    """The declared settings of an area dataclass, in declaration order."""
    return tuple(_spec_of(field) for field in dataclasses.fields(area))


def home(*parts: str) -> Callable[[], str]:
    return lambda: os.path.join(os.path.expanduser("~"), *parts)


# --- typed values -------------------------------------------------------------------------------
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_JAVA_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?")
_RANGES = {"int": (JAVA_INT_MIN, JAVA_INT_MAX), "long": (JAVA_LONG_MIN, JAVA_LONG_MAX)}


def parse_value(spec: SettingSpec, text: str) -> Any:
    """Convert broker.conf text to the setting's type and check its rule.

    Raises :class:`ConfigError` ``"key=text: rule"``.
    """
    value = _convert(spec, text)
    if value is not None and spec.rule is not None and not spec.rule.check(value):
        raise ConfigError(f"{spec.key}={text}: {spec.rule.text}")
    return value


def _convert(spec: SettingSpec, text: str) -> Any:
    if spec.kind == "str":
        return None if spec.optional and text == "" else text
    word = text.strip()
    if spec.kind in _RANGES:
        low, high = _RANGES[spec.kind]
        if _JAVA_INTEGER.fullmatch(word) and low <= int(word) <= high:
            return int(word)
        raise ConfigError(f"{spec.key}={text}: must be a Java {spec.kind} ({low}..{high})")
    if spec.kind == "bool":
        if word.lower() in ("true", "false"):
            return word.lower() == "true"
        raise ConfigError(f"{spec.key}={text}: must be true or false")
    if spec.kind == "float":
        if _JAVA_DECIMAL.fullmatch(word):
            return float(word.rstrip("fFdD"))
        raise ConfigError(f"{spec.key}={text}: must be a decimal number")
    assert spec.kind == "enum" and spec.enum_type is not None
    names = [member.value for member in spec.enum_type]
    if word in names:   # case-sensitive, like Java's Enum.valueOf
        return spec.enum_type(word)
    raise ConfigError(f"{spec.key}={text}: must be one of {', '.join(names)}")
