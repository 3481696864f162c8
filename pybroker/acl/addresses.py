# ACL 1.0 address patterns: globalWhiteRemoteAddresses and an account's whiteRemoteAddress.
"""Remote-address patterns of plain_acl.yml, with Java's spellings:

============================  =====================================================
``""`` (blank)                matches nothing
``*``, ``*.*.*.*``, ``*:*:*:*:*:*:*:*``   matches every address
``192.168.0.1``, ``::1``      one address (IPv6 compared in full form)
``192.168.0.1,192.168.0.2``   any of a list
``192.168.1.{1,2,3}``         any of a list written as a common head and ``{...}``
``192.168.*.*``, ``10.1.1.1-100``   per part: a number, ``*`` or ``a-b`` (IPv6: hex groups)
============================  =====================================================

One departure from Java (RangeRemoteAddressStrategy): Java compares only the parts up to the
first ``*`` or range and ignores the parts after it (``10.1.1-5.7`` admits ``10.1.3.9``);
here every part is compared. A pattern that does not parse raises :class:`AddressPatternError`
(Java throws while loading the file too).
"""
import ipaddress
from typing import Callable

Matcher = Callable[[str], bool]
_ANY = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


class AddressPatternError(ValueError):
    """A whiteRemoteAddress / globalWhiteRemoteAddresses entry that is not a pattern."""


def host_of(remote_address: str) -> str:
    """``"ip:port"`` (a connection's peer) -> ``"ip"``, as Java cuts at the last ``:``."""
    host, separator, _ = remote_address.rpartition(":")
    return (host if separator else remote_address).strip("[]")


def _parse_address(text: str):
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        raise AddressPatternError(f"{text!r} is not an IPv4 or IPv6 address") from None


def _address_set(texts: list[str]) -> Matcher:
    allowed = frozenset(_parse_address(text) for text in texts)

    def match(host: str) -> bool:
        try:
            return ipaddress.ip_address(host) in allowed
        except ValueError:
            return False
    return match


def _part_rule(text: str, base: int, maximum: int, pattern: str) -> tuple[int, int]:
    text = text.strip()
    try:
        if text == "*":
            return 0, maximum
        if "-" in text:
            low_text, _, high_text = text.partition("-")
            low, high = int(low_text, base), int(high_text, base)
        else:
            low = high = int(text, base)
    except ValueError:
        raise AddressPatternError(f"{pattern!r}: part {text!r} is not a number, * or a-b") \
            from None
    if not 0 <= low <= high <= maximum:
        raise AddressPatternError(f"{pattern!r}: part {text!r} is outside 0..{maximum}")
    return low, high


def _ipv6_groups(pattern: str) -> list[str]:
    groups = pattern.split(":")
    if "" in groups:   # '::' stands for the missing zero groups
        at = groups.index("")
        rest = [group for group in groups[at:] if group != ""]
        groups = groups[:at] + ["0"] * (8 - at - len(rest)) + rest
    if len(groups) != 8:
        raise AddressPatternError(f"{pattern!r}: an IPv6 pattern has 8 groups")
    return groups


def _range(pattern: str) -> Matcher:
    if ":" in pattern:
        rules = [_part_rule(group, 16, 0xFFFF, pattern) for group in _ipv6_groups(pattern)]

        def parts(host: str) -> list[int]:
            address = ipaddress.ip_address(host)
            if address.version != 6:
                raise ValueError(host)
            return [int(group, 16) for group in address.exploded.split(":")]
    else:
        texts = pattern.split(".")
        if len(texts) != 4:
            raise AddressPatternError(f"{pattern!r}: an IPv4 pattern has 4 parts")
        rules = [_part_rule(text, 10, 255, pattern) for text in texts]

        def parts(host: str) -> list[int]:
            address = ipaddress.ip_address(host)
            if address.version != 4:
                raise ValueError(host)
            return list(address.packed)

    def match(host: str) -> bool:
        try:
            values = parts(host)
        except ValueError:
            return False
        return all(low <= value <= high for value, (low, high) in zip(values, rules, strict=True))
    return match


def compile_pattern(pattern) -> Matcher:
    """A predicate over a peer's host (``"192.168.0.7"``) for one plain_acl.yml pattern."""
    text = "" if pattern is None else str(pattern).strip()
    if not text:
        return lambda host: False
    if text in _ANY:
        return lambda host: True
    if text.endswith("}"):
        head, brace, tail = text.partition("{")
        if not brace or not head or head[-1] not in ".:":
            raise AddressPatternError(f"{text!r}: expected a head ending in '.' or ':' then "
                                      "{a,b,...}")
        return _address_set([head + item for item in tail[:-1].split(",")])
    if "," in text:
        return _address_set(text.split(","))
    if "*" in text or "-" in text:
        return _range(text)
    return _address_set([text])
