# The ACL check run before every client request, and the reload of plain_acl.yml.
"""ACL 1.0 access check (Java ``PlainAccessValidator`` + ``PlainPermissionManager.validate``).

:meth:`AccessValidator.check` runs before a request reaches any handler, in every process that
answers clients (each remoting worker checks what it serves and what it forwards to the
metadata service). Order, as in Java:

1. a peer in ``globalWhiteRemoteAddresses`` passes for RESOURCES and AUTHENTICATED codes;
2. ``AccessKey`` must be present ("No accessKey is configured") and name an account
   ("No acl config for <key>");
3. the signature must verify ("Check signature failed for accessKey=<key>"), unless the peer
   matches the account's ``whiteRemoteAddress`` and the code is not an admin code;
4. admin and unclassified codes need ``admin: true`` ("Need admin permission for request
   code=<n>, but accessKey=<key> is not");
5. every topic and group the request names needs its permission ("No default permission for
   topic:<t>" / "group:<g>", Java's wording for explicit and default permissions alike);
   sends to ``RMQ_SYS_TRACE_TOPIC`` are exempt as in Java.

A refusal is the Java 4.x broker's answer: SYSTEM_ERROR (1) with the remark
``org.apache.rocketmq.acl.common.AclException: <message>`` (Java appends the first stack frame,
which pybroker has not). Departures from Java: whitelisted peers never pass admin or
unclassified codes, and a matching account address skips the signature but not permissions.

The file is re-read when its modification time, size or inode changes, checked at most every
:data:`RELOAD_CHECK_INTERVAL_S` seconds by the request that comes next; a file that no longer
parses is logged and the previous accounts stay in force.
"""
import ipaddress
import logging
import os
import time
from typing import Callable, Optional

from pybroker.acl import resources, signature
from pybroker.acl.addresses import host_of
from pybroker.acl.plain_config import AclConfigError, AclTable, Perm, load_acl_file, perm_allows
from pybroker.acl.resources import Rule
from pybroker.errors import HeaderError
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import SystemTopic

log = logging.getLogger("pybroker.acl")

RELOAD_CHECK_INTERVAL_S = 2.0
REMARK_PREFIX = "org.apache.rocketmq.acl.common.AclException: "
_WHITE_LIST_RULES = (Rule.RESOURCES, Rule.AUTHENTICATED)


class AclDenied(HeaderError):
    """A request the ACL refuses; answered SYSTEM_ERROR with Java's AclException remark."""

    def __init__(self, message: str):
        super().__init__(REMARK_PREFIX + message, int(ResponseCode.SYSTEM_ERROR))
        self.message = message


def _file_stamp(path: str) -> tuple[int, int, int]:
    status = os.stat(path)
    return status.st_mtime_ns, status.st_size, status.st_ino


class AccessValidator:
    """The accounts of ``path`` (plain_acl.yml) and the check of each request.

    Raises OSError / :class:`AclConfigError` at construction when the file cannot be used, so
    a broker refuses to start with a broken file. ``rule_of(code)``: the classification
    (the broker's :func:`resources.rule_of`, or the NameServer's :func:`resources.namesrv_rule_of`).
    """

    def __init__(self, path: str, monotonic=time.monotonic,
                 rule_of: Callable[[int], Rule] = resources.rule_of,
                 broker_networks: tuple = ()):
        self.path = path
        self._rule_of = rule_of
        self._broker_networks = broker_networks     # BROKER codes pass unsigned from these
        self._monotonic = monotonic
        self._stamp = _file_stamp(path)
        self.table: AclTable = load_acl_file(path)
        self._next_stat = monotonic() + RELOAD_CHECK_INTERVAL_S
        self.reloads_total = 0

    # --- reload ------------------------------------------------------------------------------
    def reload_if_changed(self) -> bool:
        """Re-read the file when it changed on disk; True when new accounts are in force."""
        try:
            stamp = _file_stamp(self.path)
        except OSError as error:
            log.error("ACL file %s cannot be read (%s); the accounts loaded before stay in "
                      "force", self.path, error.strerror or error)
            return False
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            table = load_acl_file(self.path)
        except (OSError, AclConfigError) as error:
            log.error("ACL file %s changed but cannot be used; the accounts loaded before stay "
                      "in force: %s", self.path, error)
            return False
        self.table = table
        self.reloads_total += 1
        log.info("ACL file %s reloaded: %d accounts, %d global white address patterns",
                 self.path, len(table.accounts), len(table.global_white_patterns))
        return True

    def _maybe_reload(self) -> None:
        now = self._monotonic()
        if now >= self._next_stat:
            self._next_stat = now + RELOAD_CHECK_INTERVAL_S
            self.reload_if_changed()

    # --- the check -----------------------------------------------------------------------------
    def guard(self, connection, request: RemotingCommand) -> None:
        """The request-table guard of a server: :meth:`check` for the peer of ``connection``
        (anything with a ``remote_address``), each refusal logged before it is raised."""
        try:
            self.check(request, connection.remote_address)
        except AclDenied as denied:
            log.warning("ACL refused request code %d from %s: %s", request.code,
                        connection.remote_address, denied.message)
            raise

    def check(self, request: RemotingCommand, remote_address: str) -> None:
        """Return when ``request`` from ``remote_address`` (``ip:port``) may be served; raise
        :class:`AclDenied` otherwise."""
        rule = self._rule_of(request.code)
        if rule == Rule.OPEN:
            return
        self._maybe_reload()
        table = self.table
        host = host_of(remote_address)
        if rule in _WHITE_LIST_RULES and table.globally_white(host):
            return
        if rule == Rule.BROKER and _in_networks(host, self._broker_networks):
            return
        fields = request.ext_fields or {}
        access_key = fields.get(signature.ACCESS_KEY)
        account = self._account(access_key)
        if not (rule in _WHITE_LIST_RULES and account.white(host)) and not \
                signature.signature_matches(fields, request.body, request.version,
                                            account.secret_key):
            raise AclDenied(f"Check signature failed for accessKey={access_key}")
        if rule not in _WHITE_LIST_RULES:
            if not account.admin:
                raise AclDenied(f"Need admin permission for request code={request.code}, but "
                                f"accessKey={access_key} is not")
            return
        try:
            needs = resources.needed(request)
        except ValueError as error:
            raise AclDenied(str(error).splitlines()[0] if str(error) else "bad request body") \
                from None
        self.check_resources(needs, account)

    def _account(self, access_key: Optional[str]):
        if access_key is None:
            raise AclDenied("No accessKey is configured")
        account = self.table.accounts.get(access_key)
        if account is None:
            raise AclDenied(f"No acl config for {access_key}")
        return account

    def check_signed(self, access_key: Optional[str], remote_address: str,
                     signed: Callable[[str], bool], needs: list) -> None:
        """The check of a request that is not a remoting command (a gRPC call): the account
        of ``access_key``, ``signed(secret_key)`` true (unless the peer is white for the
        account), the permissions of ``needs`` (resources.Need). AclDenied otherwise."""
        self._maybe_reload()
        host = host_of(remote_address)
        if self.table.globally_white(host):
            return
        account = self._account(access_key)
        if not account.white(host) and not signed(account.secret_key):
            raise AclDenied(f"Check signature failed for accessKey={access_key}")
        self.check_resources(needs, account)

    @staticmethod
    def check_resources(needs: list, account) -> None:
        """Every (is_group, name, perm) of ``needs`` allowed to ``account``."""
        if any(not is_group and name == SystemTopic.TRACE and perm == Perm.PUB
               for is_group, name, perm in needs):
            return   # Java lets every account write message traces
        _check_needs(account, needs)

    # --- a record's own topic (broker.interfaces.TopicReadCheck) --------------------------------
    def check_read(self, request: RemotingCommand, remote_address: str, topic: str) -> None:
        """SUB on ``topic`` for the requester of ``request`` (which passed :meth:`check`):
        a whitelisted peer, or its account's permission; AclDenied (logged) otherwise."""
        if self.table.globally_white(host_of(remote_address)):
            return
        access_key = (request.ext_fields or {}).get(signature.ACCESS_KEY)
        account = self.table.accounts.get(access_key) if access_key is not None else None
        try:
            if account is None:
                raise AclDenied("No accessKey is configured")
            _check_needs(account, resources.topic_needs(topic, Perm.SUB))
        except AclDenied as denied:
            log.warning("ACL refused a record of topic %s to request code %d from %s: %s",
                        topic, request.code, remote_address, denied.message)
            raise

    def may_read(self, request: RemotingCommand, remote_address: str, topic: str) -> bool:
        try:
            self.check_read(request, remote_address, topic)
        except AclDenied:
            return False
        return True


def _in_networks(host: str, networks: tuple) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


def _check_needs(account, needs) -> None:
    """Every (is_group, name, perm) of ``needs`` is the account's, or AclDenied."""
    if account.admin and not account.topic_perms and not account.group_perms:
        return   # Java: an admin with no resource list may use every resource
    for is_group, name, perm in needs:
        owned_map = account.group_perms if is_group else account.topic_perms
        owned: Optional[Perm] = owned_map.get(name)
        if owned is None:
            owned = account.default_group_perm if is_group else account.default_topic_perm
        if not perm_allows(perm, owned):
            kind = "group" if is_group else "topic"
            raise AclDenied(f"No default permission for {kind}:{name}")
