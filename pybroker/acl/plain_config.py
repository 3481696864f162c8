# plain_acl.yml: Java ACL 1.0's account file, read into an immutable table.
"""Read ``plain_acl.yml`` (Java RocketMQ 4.x ACL 1.0 format) into an :class:`AclTable`.

The file::

    globalWhiteRemoteAddresses:        # peers let in without a signature (never for admin codes)
      - 10.10.103.*
    accounts:
      - accessKey: producerAccount     # > 6 characters
        secretKey: s3cret-value        # > 6 characters
        whiteRemoteAddress: 192.168.0.*   # optional; see pybroker.acl.addresses
        admin: false
        defaultTopicPerm: DENY         # PUB, SUB, PUB|SUB (SUB|PUB) or DENY; missing = DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=PUB, topicB=PUB|SUB, topicC=DENY]
        groupPerms: [groupA=SUB]

Departures from Java, each a silent surprise there: a permission word other than the five
is an error (Java reads it as DENY), an account's accessKey appearing twice is an error (Java
keeps the later one), a ``topic=perm`` entry without ``=`` is an error in both, and the sample
secret of Java's distribution file (``12345678``) is refused. Unknown keys are logged.
Numbers written without quotes (``secretKey: 12345678``) are read as text, as Java does.
"""
import dataclasses
import enum
import logging
from typing import Any, Optional

import yaml

from pybroker.acl.addresses import AddressPatternError, Matcher, compile_pattern

log = logging.getLogger("pybroker.acl")

KEY_MIN_LENGTH_EXCLUSIVE = 6   # Java ACCESS_KEY_MIN_LENGTH: keys are "longer than 6"
SAMPLE_SECRETS = frozenset({"12345678"})   # the secretKey of Java's shipped plain_acl.yml
_ACCOUNT_KEYS = frozenset({"accessKey", "secretKey", "whiteRemoteAddress", "admin",
                           "defaultTopicPerm", "defaultGroupPerm", "topicPerms", "groupPerms"})
_TOP_KEYS = frozenset({"globalWhiteRemoteAddresses", "accounts", "dataVersion"})


class AclConfigError(ValueError):
    """plain_acl.yml cannot be used; the message names the entry and the rule."""


class Perm(enum.IntFlag):
    """Java's ``Permission`` bits."""
    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8


_PERM_WORDS = {"PUB": Perm.PUB, "SUB": Perm.SUB, "PUB|SUB": Perm.PUB | Perm.SUB,
               "SUB|PUB": Perm.PUB | Perm.SUB, "DENY": Perm.DENY}


def perm_allows(needed: Perm, owned: Perm) -> bool:
    """Java's ``Permission.checkPermission``: DENY wins; ANY needs PUB or SUB."""
    if owned & Perm.DENY:
        return False
    if needed & Perm.ANY:
        return bool(owned & (Perm.PUB | Perm.SUB))
    return bool(needed & owned)


@dataclasses.dataclass(frozen=True)
class Account:
    """One ``accounts`` entry. The secret never appears in repr or logs."""
    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    white_remote_address: str
    white: Matcher = dataclasses.field(repr=False, compare=False)
    admin: bool
    default_topic_perm: Perm
    default_group_perm: Perm
    topic_perms: dict[str, Perm]
    group_perms: dict[str, Perm]


@dataclasses.dataclass(frozen=True)
class AclTable:
    """Everything a check needs, replaced as a whole on reload."""
    global_white_patterns: tuple[str, ...]
    global_white: tuple[Matcher, ...] = dataclasses.field(repr=False, compare=False)
    accounts: dict[str, Account] = dataclasses.field(repr=False)

    def globally_white(self, host: str) -> bool:
        return any(match(host) for match in self.global_white)


def _text(value: Any, where: str, *, required: bool = False) -> Optional[str]:
    if value is None:
        if required:
            raise AclConfigError(f"{where}: missing")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise AclConfigError(f"{where}: {value!r} is not text")
    return str(value)


def _perm(word: Any, where: str) -> Perm:
    if word is None:
        return Perm.DENY
    text = _text(word, where)
    perm = _PERM_WORDS.get((text or "").strip())
    if perm is None:
        raise AclConfigError(f"{where}: {word!r} is not PUB, SUB, PUB|SUB, SUB|PUB or DENY")
    return perm


def _resource_perms(entries: Any, where: str) -> dict[str, Perm]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise AclConfigError(f"{where}: must be a list of name=PERM")
    perms = {}
    for index, entry in enumerate(entries):
        text = _text(entry, f"{where}[{index}]", required=True) or ""
        name, separator, word = text.partition("=")
        if not separator or not name.strip() or "=" in word:
            raise AclConfigError(f"{where}[{index}]: {text!r} is not name=PERM")
        perms[name.strip()] = _perm(word, f"{where}[{index}]")
    return perms


def _account(entry: Any, where: str) -> Account:
    if not isinstance(entry, dict):
        raise AclConfigError(f"{where}: must be a mapping")
    for key in set(entry) - _ACCOUNT_KEYS:
        log.warning("plain ACL file: %s: unknown key %r ignored", where, key)
    access_key = _text(entry.get("accessKey"), f"{where}.accessKey", required=True) or ""
    secret_key = _text(entry.get("secretKey"), f"{where}.secretKey", required=True) or ""
    where = f"{where} (accessKey={access_key})"
    if len(access_key) <= KEY_MIN_LENGTH_EXCLUSIVE or len(secret_key) <= KEY_MIN_LENGTH_EXCLUSIVE:
        raise AclConfigError(f"{where}: accessKey and secretKey must be longer than "
                             f"{KEY_MIN_LENGTH_EXCLUSIVE} characters")
    if secret_key in SAMPLE_SECRETS:
        raise AclConfigError(f"{where}: the secretKey is the sample of RocketMQ's distribution "
                             "file; choose a secret of your own")
    admin = entry.get("admin", False)
    if not isinstance(admin, bool):
        raise AclConfigError(f"{where}.admin: {admin!r} is not true or false")
    white_text = _text(entry.get("whiteRemoteAddress"), f"{where}.whiteRemoteAddress") or ""
    try:
        white = compile_pattern(white_text)
    except AddressPatternError as error:
        raise AclConfigError(f"{where}.whiteRemoteAddress: {error}") from None
    return Account(access_key, secret_key, white_text, white, admin,
                   _perm(entry.get("defaultTopicPerm"), f"{where}.defaultTopicPerm"),
                   _perm(entry.get("defaultGroupPerm"), f"{where}.defaultGroupPerm"),
                   _resource_perms(entry.get("topicPerms"), f"{where}.topicPerms"),
                   _resource_perms(entry.get("groupPerms"), f"{where}.groupPerms"))


def parse_acl_text(text: str, source: str = "plain_acl.yml") -> AclTable:
    """The :class:`AclTable` of a plain_acl.yml text; :class:`AclConfigError` on any problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise AclConfigError(f"{source}: not YAML: {error}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise AclConfigError(f"{source}: the top level must be a mapping")
    for key in set(data) - _TOP_KEYS:
        log.warning("plain ACL file %s: unknown key %r ignored", source, key)
    patterns = data.get("globalWhiteRemoteAddresses") or []
    accounts_data = data.get("accounts") or []
    if not isinstance(patterns, list) or not isinstance(accounts_data, list):
        raise AclConfigError(f"{source}: globalWhiteRemoteAddresses and accounts must be lists")
    texts = tuple(_text(item, f"{source}: globalWhiteRemoteAddresses") or "" for item in patterns)
    try:
        matchers = tuple(compile_pattern(item) for item in texts)
    except AddressPatternError as error:
        raise AclConfigError(f"{source}: globalWhiteRemoteAddresses: {error}") from None
    accounts: dict[str, Account] = {}
    for index, entry in enumerate(accounts_data):
        account = _account(entry, f"{source}: accounts[{index}]")
        if account.access_key in accounts:
            raise AclConfigError(f"{source}: accounts[{index}]: accessKey "
                                 f"{account.access_key} appears twice")
        accounts[account.access_key] = account
    return AclTable(texts, matchers, accounts)


def load_acl_file(path: str) -> AclTable:
    """Read and parse ``path``; OSError when it cannot be read, AclConfigError when invalid."""
    with open(path, encoding="utf-8") as stream:
        return parse_acl_text(stream.read(), path)
