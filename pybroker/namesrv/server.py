# The NameServer process: listener, expired-broker scan, channel-close cleanup, signal shutdown.
"""Run a NameServer (``pybroker namesrv``) on one asyncio loop.

Start-up: load the KV config (``kvConfigPath``), listen on ``<address>:listenPort``, log the
important settings and "The Name Server boot success. serializeType=JSON" with the address.
While running: every ``scanNotActiveBrokerInterval`` ms (5 s, the 5.x period; 4.9.x used 10 s)
brokers silent for ``brokerChannelExpiredTimeMs`` (120 s, or the broker's own 5.x
``heartbeatTimeoutMillis``) are dropped and their connections closed; a closed connection drops
the brokers registered over it at once. SIGTERM or SIGINT: stop listening, close every
connection, return 0.
"""
import asyncio
import logging
import signal
from typing import Callable

from pybroker import clock
from pybroker import config as config_module
from pybroker.acl import resources
from pybroker.acl.plain_config import AclConfigError
from pybroker.acl.validator import AccessValidator
from pybroker.config import NamesrvProcessConfig
from pybroker.namesrv.kv_config import KVConfigManager
from pybroker.namesrv.processor import NamesrvProcessor
from pybroker.namesrv.route_table import RouteInfoManager
from pybroker.namesrv.settings_requests import NamesrvSettingsRequests
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import RemotingServer, RequestTable, start_server
from pybroker.remoting.tls import TlsServer
from pybroker.schema import parse_networks
from pybroker.tasks import Rounds, start_task

log = logging.getLogger(__name__)

LISTEN_ADDRESS_DEFAULT = "127.0.0.1"
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class NamesrvController:
    """The NameServer's state and listener (Java ``NamesrvController``).

    ``config``: the loaded :class:`~pybroker.config.NamesrvProcessConfig`. ``listen_address``:
    the IP to bind. ``now_ms``: clock in ms since the epoch. ``on_failure(error)``: the
    expired-broker scan gave up (pybroker/tasks.py; logged with its cause).
    """

    def __init__(self, config: NamesrvProcessConfig,
                 listen_address: str = LISTEN_ADDRESS_DEFAULT,
                 now_ms: Callable[[], int] = clock.now_ms,
                 on_failure: Callable[[BaseException], None] | None = None):
        namesrv = config.namesrv
        self.config = config
        self.on_failure = on_failure
        self.listen_address = listen_address
        self.now_ms = now_ms
        self.route_table = RouteInfoManager(namesrv.broker_channel_expired_time_ms)
        self.kv_config = KVConfigManager(namesrv.kv_config_path)
        self.processor = NamesrvProcessor(self.route_table, self.kv_config,
                                          order_message_enable=namesrv.order_message_enable,
                                          now_ms=now_ms)
        self.settings = NamesrvSettingsRequests(lambda: self.config, self.apply_settings)
        # aclEnable (pybroker only): writes need a signed admin account, a broker's
        # registration an allowed address or a signed admin; reads stay open
        # (resources.namesrv_rule_of, docs/security.md).
        self.acl = AccessValidator(
            config.acl_file_path, rule_of=resources.namesrv_rule_of,
            broker_networks=parse_networks(namesrv.broker_registration_allowed_addresses) or ()) \
            if config.acl_file_path else None
        self.server: RemotingServer | None = None
        self._scan_task: asyncio.Task | None = None

    async def start(self) -> str:
        """Load the KV config and listen; returns the served ``"ip:port"``."""
        self.kv_config.load()
        limits = ConnectionLimits.from_config(self.config.remoting)
        self.server = await start_server(
            self.listen_address, self.config.namesrv.listen_port,
            RequestTable({**self.processor.handlers, **self.settings.handlers},
                         guard=self.acl.guard if self.acl is not None else None),
            on_close=self._connection_closed,
            limits=limits, backlog=self.config.remoting.server_socket_backlog,
            tls=TlsServer.from_config(self.config.tls))
        self._scan_task = start_task(self._scan_loop(), "the expired-broker scan",
                                     self.on_failure, log)
        return self.server.address

    def apply_settings(self, config: NamesrvProcessConfig) -> None:
        """Make ``config`` current (UPDATE_NAMESRV_CONFIG's live settings): the processor
        and the route table read theirs from here, the scan reads its interval each wait."""
        self.config = config
        self.processor.order_message_enable = config.namesrv.order_message_enable
        self.route_table.broker_channel_expired_time_ms = \
            config.namesrv.broker_channel_expired_time_ms

    def _connection_closed(self, connection, exc: BaseException | None) -> None:
        removed = self.route_table.channel_closed(connection, connection.remote_address)
        if removed:
            log.info("connection from %s closed; removed brokers %s",
                     connection.remote_address, removed)

    async def _scan_loop(self) -> None:
        interval_s = self.config.namesrv.scan_not_active_broker_interval / 1000
        rounds = Rounds("the expired-broker scan", logger=log)
        while True:
            await asyncio.sleep(interval_s)
            with rounds:
                self.scan_not_active_brokers()

    def scan_not_active_brokers(self) -> None:
        """Drop brokers whose heartbeats stopped, and close their connections."""
        for _, channel in self.route_table.scan_not_active(self.now_ms()):
            abort = getattr(channel, "abort", None)
            if abort is not None:
                abort("broker channel expired")

    async def stop(self) -> None:
        """Stop scanning, stop listening, close every connection."""
        if self._scan_task is not None:
            self._scan_task.cancel()
            try:
                await self._scan_task
            except asyncio.CancelledError:
                pass
            self._scan_task = None
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None


async def serve(config: NamesrvProcessConfig, listen_address: str = LISTEN_ADDRESS_DEFAULT,
                stop_event: asyncio.Event | None = None, stop_signals=_STOP_SIGNALS) -> int:
    """Run a NameServer until one of ``stop_signals`` (SIGTERM, SIGINT) arrives or
    ``stop_event`` is set; returns exit code 0, or 1 when its scan failed for good.

    Signal handlers are installed only when running in the main thread.
    """
    stop_event = stop_event if stop_event is not None else asyncio.Event()
    failures: list[BaseException] = []

    def failed(error: BaseException) -> None:
        log.error("The Name Server stops: its expired-broker scan failed")
        failures.append(error)
        stop_event.set()
    try:
        controller = NamesrvController(config, listen_address, on_failure=failed)
    except (OSError, AclConfigError) as error:
        log.error("cannot start: %s", error)
        return 1
    if controller.acl is not None:
        log.info("ACL enabled: %s, %d accounts (KV writes and broker permission changes need "
                 "an admin account)", controller.acl.path, len(controller.acl.table.accounts))
    loop = asyncio.get_running_loop()
    installed = []
    for stop_signal in stop_signals:
        try:
            loop.add_signal_handler(stop_signal, stop_event.set)
            installed.append(stop_signal)
        except (RuntimeError, ValueError):   # not the main thread
            break
    # A forked NameServer (standalone mode) starts with its stop signal blocked until now
    # (pybroker/proc/children.py): a stop sent while it started is delivered here.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, installed)
    try:
        address = await controller.start()
        for key, value in config_module.important_settings(config):
            log.info("%s=%s", key, value)
        log.info("The Name Server boot success. serializeType=JSON, listening on %s", address)
        await stop_event.wait()
        log.info("The Name Server shutting down")
    finally:
        await controller.stop()
        for stop_signal in installed:
            loop.remove_signal_handler(stop_signal)
    log.info("The Name Server stopped")
    return 1 if failures else 0


def run_namesrv(config: NamesrvProcessConfig, listen_address: str = LISTEN_ADDRESS_DEFAULT,
                stop_signals=_STOP_SIGNALS) -> int:
    """Run :func:`serve` on a new event loop (blocking); returns the exit code."""
    return asyncio.run(serve(config, listen_address, stop_signals=stop_signals))
