# A slave's link to its master: addresses from the NameServer, metadata sync every 10 s.
"""What a slave broker does besides replicating the CommitLog (protocol.md §6.2).

* **Master addresses.** Each REGISTER_BROKER answer names the master's HA address
  (``haServerAddr``) and remoting address (``masterAddr``). Unless ``haMasterAddress`` is
  configured (then it is used and never replaced, as in Java), the HA address is written to
  ``run/ha-master`` and the ha worker's eventfd is signalled: it reconnects to a new address.
* **Metadata sync** (Java SlaveSynchronize), 3 s after start then every 10 s, against
  ``masterAddr``: GET_ALL_TOPIC_CONFIG (21) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) replace
  the slave's documents when the master's data version differs, GET_ALL_CONSUMER_OFFSET (43)
  overwrites the offsets the master has, GET_ALL_DELAY_OFFSET (45) is written to
  ``delayOffset.json`` as it came (the schedule service does not run on a slave; a slave
  turned master starts from it), and (5.x) GET_ALL_MESSAGE_REQUEST_MODE (402) replaces the
  topics the master has in ``messageRequestMode.json`` and drops the others (a 4.x master
  does not serve 402: said once, then skipped). Everything goes through the metadata
  service's state (persisted at once), so a restarted slave serves it before the first sync.
  Each request failing is logged and retried on the next round.
* **Timer** (5.x, with ``timerWheelEnable``): GET_TIMER_CHECK_POINT (60) every 3 s, handed to
  the slave's timer worker (through the control block's timer master line): it enqueues no
  further than the master's queue offset and follows its read time; GET_TIMER_METRICS (61) each
  round, written to ``config/timermetrics`` when its data version differs (on a slave the link
  is that file's writer). A master that answers neither (4.x) is logged once per cause.
"""
import asyncio
import logging
import os
from collections.abc import Callable

from pybroker.errors import HeaderError
from pybroker.protocol import fastjson, headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.acl.signature import inner_signer
from pybroker.remoting.client import RemotingClientPool
from pybroker.remoting.tls import outgoing_tls
from pybroker.store import config_docs, paths
from pybroker.store.timer_checkpoint import CheckpointValues
from pybroker.store.timer_metrics import TimerMetrics, load_timer_metrics, save_timer_metrics
from pybroker.tasks import Rounds

log = logging.getLogger("pybroker.broker.slave_sync")

__all__ = ["SlaveLink", "SYNC_FIRST_DELAY_S", "SYNC_INTERVAL_S"]

SYNC_FIRST_DELAY_S = 3.0
SYNC_INTERVAL_S = 10.0
TIMER_SYNC_INTERVAL_S = 3.0     # Java syncs the timer checkpoint every 3 s
SYNC_TIMEOUT_MS = 3000
MASTER_UNKNOWN_RETRY_S = 3.0
CONTROLLER_MASTER_RETRY_S = 0.5
# 5.x sync codes a 4.x master answers REQUEST_CODE_NOT_SUPPORTED.
FIVE_X_SYNC_CODES = frozenset({RequestCode.GET_ALL_MESSAGE_REQUEST_MODE})


class SlaveLink:
    """A slave's knowledge of its master (see the module docstring).

    ``metadata`` is the metadata service's MetadataState; ``ha_wake`` the ha worker's WakeFd;
    ``on_changed()`` runs after a sync changed something (push snapshots to the workers).
    """

    def __init__(self, config, metadata, ha_wake,
                 on_changed: Callable[[], object] = lambda: None,
                 expected_master: str | None = None,
                 timer_checkpoint: Callable[[CheckpointValues], None] | None = None):
        self.config = config
        # Controller mode: the master the controller named; another broker registered as
        # master at the NameServer (a stale entry) is not followed.
        self.expected_master = expected_master
        self.metadata = metadata
        self.ha_wake = ha_wake
        self.on_changed = on_changed
        self.store_root = config.store.store_path_root_dir
        self.configured_ha_address = config.store.ha_master_address
        self.ha_address: str | None = None
        self.master_address: str | None = None
        self.pool = RemotingClientPool(ssl_context=outgoing_tls(config),
                                       signer=inner_signer(config))
        self.syncs_total = 0
        self._not_served_said: set[tuple[RequestCode, str]] = set()
        # The slave's timer (config.store.timer_wheel_enable): where a master checkpoint goes.
        self.timer_checkpoint = timer_checkpoint if config.store.timer_wheel_enable else None
        self.timer_syncs_total = 0
        # The causes logged per request since its last success (a master restart in between
        # must not make a 4.x master's refusal news again).
        self._timer_failures: dict[RequestCode, set[str]] = {}
        if self.configured_ha_address:
            self._set_ha_address(self.configured_ha_address)

    def on_registered(self, response) -> None:
        """A REGISTER_BROKER answer: learn the master's addresses."""
        try:
            answer = headers.REGISTER_BROKER_RESPONSE.parse(response.ext_fields)
        except HeaderError as error:     # a NameServer's bad answer must not stop the broker
            log.warning("register answer without master addresses: %s", error)
            return
        if self.expected_master is not None and answer.master_addr != self.expected_master:
            log.info("NameServer names master %s, the controller %s: waiting",
                     answer.master_addr, self.expected_master)
            self.master_address = None
            return
        if answer.master_addr and answer.master_addr != self.master_address:
            log.info("master of %s is %s", self.config.broker.broker_name, answer.master_addr)
        self.master_address = answer.master_addr or None   # None: the master is down
        if not self.configured_ha_address and answer.ha_server_addr:
            self._set_ha_address(answer.ha_server_addr)

    def _set_ha_address(self, address: str) -> None:
        if address == self.ha_address and os.path.exists(
                paths.ha_master_address_path(self.store_root)):
            return
        self.ha_address = address
        path = paths.ha_master_address_path(self.store_root)
        with open(path + ".tmp", "w", encoding="utf-8") as out:
            out.write(address + "\n")
        os.replace(path + ".tmp", path)
        self.ha_wake.signal()

    async def run(self, register_soon) -> None:
        """Sync from the master every 10 s (first after 3 s) until cancelled. While no master
        is known, ``register_soon()`` is called every 3 s (Java waits for its next periodic
        registration, up to 30 s; a restarted master is found sooner this way). In controller
        mode the master was just elected and registers within a second: every 0.5 s."""
        retry_s = MASTER_UNKNOWN_RETRY_S if self.expected_master is None \
            else CONTROLLER_MASTER_RETRY_S
        await asyncio.sleep(SYNC_FIRST_DELAY_S if self.expected_master is None else retry_s)
        # The two loops end only when their Rounds guard gives up (pybroker/tasks.py); the
        # group then cancels the other and run() ends by the error, which ends the service.
        async with asyncio.TaskGroup() as group:
            group.create_task(self._sync_rounds(register_soon, retry_s))  # tidy: allow (awaited)
            if self.timer_checkpoint is not None:
                group.create_task(self._timer_rounds())  # tidy: allow (awaited)

    async def _sync_rounds(self, register_soon, retry_s: float) -> None:
        # A sync the master refuses is logged by sync_all; a round that raises anything else
        # is logged and retried at the next interval (pybroker/tasks.py).
        rounds = Rounds("slave sync", logger=log)
        while True:
            if not self.master_address:
                register_soon()
                await asyncio.sleep(retry_s)
                continue
            if self.master_address != self.config.derived.broker_addr:
                with rounds:
                    await self.sync_all(self.master_address)
            await asyncio.sleep(SYNC_INTERVAL_S)

    async def _timer_rounds(self) -> None:
        # A failure the master causes is logged once per cause by sync_timer_checkpoint; any
        # other is the round guard's.
        rounds = Rounds("slave timer checkpoint sync", logger=log)
        while True:
            address = self.master_address
            if address and address != self.config.derived.broker_addr:
                with rounds:
                    await self.sync_timer_checkpoint(address)
            await asyncio.sleep(TIMER_SYNC_INTERVAL_S)

    async def sync_timer_checkpoint(self, address: str) -> bool:
        """GET_TIMER_CHECK_POINT from the master, handed to the slave's timer; True when
        taken."""
        assert self.timer_checkpoint is not None
        taken = await self._sync_timer(address, RequestCode.GET_TIMER_CHECK_POINT,
                                       self._take_timer_checkpoint)
        if taken:
            self.timer_syncs_total += 1
        return taken

    async def _sync_timer(self, address: str, code: RequestCode, apply) -> bool:
        """One timer request to the master and ``apply(body)``; a failure is logged once per
        request and cause (a 4.x master has no timer: it refuses both every round)."""
        try:
            response = await self.pool.invoke(address, create_request(code, {}),
                                              SYNC_TIMEOUT_MS)
            if response.code != ResponseCode.SUCCESS or not response.body:
                raise ValueError(f"code {response.code} {response.remark or ''}")
            apply(response.body)
        except (OSError, TimeoutError, ConnectionError, ValueError, TypeError) as error:
            cause = f"{type(error).__name__}: {error}"
            logged = self._timer_failures.setdefault(code, set())
            if cause not in logged:
                log.error("slave sync %s from master %s failed: %s (logged once)", code.name,
                          address, cause)
                logged.add(cause)
            return False
        self._timer_failures.pop(code, None)
        return True

    def _take_timer_checkpoint(self, body) -> None:
        assert self.timer_checkpoint is not None
        self.timer_checkpoint(CheckpointValues.decode(body))

    async def sync_all(self, address: str) -> None:
        """One round of the syncs against the master at ``address``."""
        changed = False
        for code, apply in ((RequestCode.GET_ALL_TOPIC_CONFIG, self._topics),
                            (RequestCode.GET_ALL_CONSUMER_OFFSET, self._offsets),
                            (RequestCode.GET_ALL_DELAY_OFFSET, self._delay_offsets),
                            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self._groups),
                            (RequestCode.GET_ALL_MESSAGE_REQUEST_MODE, self._request_modes)):
            try:
                response = await self.pool.invoke(address, create_request(code, {}),
                                                  SYNC_TIMEOUT_MS)
                if self._not_served(code, response.code, address):
                    continue
                if response.code != ResponseCode.SUCCESS or not response.body:
                    raise ValueError(f"code {response.code} {response.remark or ''}")
                changed |= apply(fastjson.loads(response.body))
            except (OSError, TimeoutError, ConnectionError, ValueError, TypeError) as error:
                log.error("slave sync %s from master %s failed: %s", code.name, address, error)
        if self.timer_checkpoint is not None:
            await self._sync_timer(address, RequestCode.GET_TIMER_METRICS, self._timer_metrics)
        self.syncs_total += 1
        if changed:
            self.on_changed()

    def _not_served(self, code: RequestCode, response_code: int, address: str) -> bool:
        """True when a 4.x master does not serve a 5.x sync code: said once, then skipped."""
        if code not in FIVE_X_SYNC_CODES or \
                response_code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return False
        if (code, address) not in self._not_served_said:
            self._not_served_said.add((code, address))
            log.info("master %s does not serve %s (a 4.x broker): not synced", address,
                     code.name)
        return True

    def _topics(self, value) -> bool:
        taken = self.metadata.topics.replace_from_master(
            config_docs.TopicConfigDocument.from_json(value))
        if taken:
            log.info("Update slave topic config from master, %s", self.master_address)
        return taken

    def _groups(self, value) -> bool:
        taken = self.metadata.groups.replace_from_master(
            config_docs.SubscriptionGroupDocument.from_json(value))
        if taken:
            log.info("Update slave Subscription Group from master, %s", self.master_address)
        return taken

    def _request_modes(self, value) -> bool:
        if self.metadata.request_modes.replace_from_master(
                config_docs.MessageRequestModeDocument.from_json(value)):
            log.info("Update slave Message Request Mode from master, %s", self.master_address)
        return False   # not part of the workers' snapshot

    def _offsets(self, value) -> bool:
        self.metadata.offsets.merge_from_master(
            config_docs.ConsumerOffsetDocument.from_json(value))
        return False

    def _delay_offsets(self, value) -> bool:
        config_docs.save_delay_offsets(
            paths.config_path(self.store_root, paths.DELAY_OFFSET_CONFIG),
            config_docs.DelayOffsetDocument.from_json(value))
        return False

    def _timer_metrics(self, body) -> None:
        path = paths.config_path(self.store_root, paths.TIMER_METRICS_CONFIG)
        master = TimerMetrics.from_json(fastjson.loads(body))
        mine = load_timer_metrics(path)
        if mine.replace(master):
            save_timer_metrics(path, mine)

    def close(self) -> None:
        self.pool.close()
