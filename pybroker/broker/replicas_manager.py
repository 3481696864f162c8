# Controller mode in the supervisor: identity, heartbeats, roles and the master's SyncStateSet.
"""The supervisor's side of controller mode (Java ``ReplicasManager``;
docs/architecture/controller.md).

It registers the broker with Apache's controller (the next free broker id, applied through the
``brokerIdentity`` files, then CONTROLLER_REGISTER_BROKER), sends BROKER_HEARTBEAT every
``brokerHeartbeatInterval`` on connections that outlive data-plane generations, asks for the
broker set's master every ``syncBrokerMetadataPeriod`` (and takes the controller's
NOTIFY_BROKER_ROLE_CHANGED at once), asks to be elected when the set has no master, and on a
master keeps the SyncStateSet (broker/sync_state.py) in step with the slaves' progress.

**A role is a published state, never a guess.** The role, the master epoch and the master's
address decided here are what the data plane's processes run as. A slave elected master
switches in-process (the supervisor's ``_promote``); any other decision that changes them
ends the running generation in order and starts the next one in the new role, exactly as a
worker death does (one code path). A broker elected master appends the new epoch at the end
of its CommitLog before its master processes start (Java's changeToMaster). Until the
first decision the broker runs *fenced*: slave-shaped, refusing writes, not registered with
any NameServer (Java's isolated broker). Within a master generation the SyncStateSet members
that acknowledgements wait for are published in the control block (``publish_sync_state``)
and the ha worker is woken to apply them.
"""
import asyncio
import dataclasses
import enum
import logging
import os
import random

from pybroker import clock
from pybroker.broker import sync_state
from pybroker.broker.controller_client import (ControllerClient, ControllerError,
                                               HeartbeatChannels, controller_addresses)
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.controller import MASTER_BROKER_ID
from pybroker.store import broker_identity
from pybroker.store.epoch_file import EpochFile
from pybroker.store.settings import BrokerRole
from pybroker.tasks import Rounds

log = logging.getLogger("pybroker.broker.replicas")

__all__ = ["Role", "ReplicaRole", "ReplicasManager", "with_role"]

_RETRY_S = 5.0                 # Java RETRY_INTERVAL_SECOND
_FIRST_SYNC_DELAY_S = 3.0      # Java's first syncBrokerMetadata / checkSyncStateSet
_SYNC_STATE_POLL_S = 0.2       # joins and lost slaves are acted on within this


class Role(enum.Enum):
    FENCED = "FENCED"          # registered or not, no master known: refuses writes
    MASTER = "MASTER"
    SLAVE = "SLAVE"


@dataclasses.dataclass(frozen=True)
class ReplicaRole:
    """What one generation runs as."""
    role: Role
    broker_id: int                       # this broker's controller id, -1 while unknown
    master_epoch: int = 0
    master_broker_id: int | None = None
    master_address: str | None = None


def with_role(config, broker_role: BrokerRole, broker_id: int):
    """``config`` as a broker of ``broker_role`` with ``brokerId`` ``broker_id`` runs it (the
    master address comes from the controller, never from the file)."""
    return dataclasses.replace(
        config, broker=dataclasses.replace(config.broker, broker_id=broker_id),
        store=dataclasses.replace(config.store, broker_role=broker_role,
                                  ha_master_address=None))


class ReplicasManager:
    """One per broker process in controller mode (see the module docstring)."""

    def __init__(self, config):
        self.config = config
        store = config.store
        self.identity_path = store.broker_identity_path
        self.epoch_path = store.epoch_file_path
        self.broker_addr = config.derived.broker_addr
        self.heartbeats = HeartbeatChannels(controller_addresses(config.broker.controller_addr),
                                            config.broker.send_heartbeat_timeout_millis)
        self.leader: str | None = None
        self.broker_id = -1
        self.registered = False
        self.master_broker_id: int | None = None
        self.master_address: str | None = None
        self.master_epoch = 0
        self.sync = sync_state.SyncStateSet(frozenset(), 0)
        self.joining: frozenset[int] = frozenset()
        self.decided = ReplicaRole(Role.FENCED, -1)
        self.running = self.decided
        self._restart = lambda: None
        self._control = None
        self._ha_wake = None
        self._client: ControllerClient | None = None
        self._altering = False
        self._frozen = False              # a stopping generation: the set is left as it is
        self._seen: set[int] = set()
        self.role_changes_total = 0

    # --- generations ------------------------------------------------------------------------
    def generation_config(self, config):
        """``config`` as the decided role runs it: a master is SYNC_MASTER and registers with
        brokerId 0 (Java sets both); a slave or fenced broker is SLAVE with its own id."""
        role = self.decided
        if role.role is Role.MASTER:
            broker_role, broker_id = BrokerRole.SYNC_MASTER, MASTER_BROKER_ID
        else:
            broker_role, broker_id = BrokerRole.SLAVE, max(role.broker_id, 1)
        return with_role(config, broker_role, broker_id)

    def prepare_generation(self, valid_end: int) -> ReplicaRole:
        """Before a generation forks (the store recovered to ``valid_end``): a new master's
        epoch starts there. Returns the role the generation runs as."""
        role = self.decided
        self._drop_expired_epochs()
        if role.role is Role.MASTER:
            epochs = EpochFile.load(self.epoch_path)
            # The same epoch again (a restart of this master's data plane, or of the broker
            # while the controller still names it): it started where the file says. A newer
            # epoch in the file than the controller's goes (Java's changeToMaster).
            if epochs.last_epoch() > role.master_epoch:
                epochs.truncate_suffix_by_epoch(role.master_epoch)
            if epochs.last_epoch() < role.master_epoch:
                epochs.append(role.master_epoch, valid_end)
            log.info("master of %s at epoch %d, CommitLog end %d (epochs %s)",
                     self.config.broker.broker_name, role.master_epoch, valid_end,
                     [(entry.epoch, entry.start_offset) for entry in epochs.entries])
        self.running = role
        return role

    def _drop_expired_epochs(self) -> None:
        """Epochs that end before the oldest CommitLog file left (expired files were deleted)
        go, as Java's store does when it deletes them (truncateEpochFilePrefix)."""
        directory = self.config.store.commitlog_dir
        try:
            names = [name for name in os.listdir(directory) if name.isdigit()]
        except FileNotFoundError:
            return
        if names:
            EpochFile.load(self.epoch_path).truncate_prefix_by_offset(min(map(int, names)) - 1)

    @property
    def registers_with_namesrv(self) -> bool:
        """A fenced broker stays off the NameServers (Java's isolated broker)."""
        return self.running.role is not Role.FENCED

    async def run(self, control, ha_wake, restart) -> None:
        """Serve one generation until cancelled: ``control`` is its control block, ``ha_wake``
        its ha worker's eventfd, ``restart()`` acts on a new decided role (the supervisor
        switches in-process or ends the generation)."""
        self._control, self._ha_wake, self._restart = control, ha_wake, restart
        self._frozen = False
        if self.decided != self.running:
            # Decided between two generations (a notification served late): act now.
            restart()
            return
        loop = asyncio.get_running_loop()
        self.heartbeats.attach(loop)
        self._client = ControllerClient(self.config, self.leader)
        self._seen = set()
        # Gathered below: the first to end by an error ends run() with it.
        tasks = [loop.create_task(self._heartbeat_loop()),  # tidy: allow (awaited)
                 loop.create_task(self._controller_metadata_loop()),  # tidy: allow (awaited)
                 loop.create_task(self._main_loop())]  # tidy: allow (awaited)
        if self.running.role is Role.MASTER:
            self.publish_sync_state()
            tasks.append(loop.create_task(self._sync_state_loop()))  # tidy: allow (awaited)
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            self.leader = self._client.leader
            self._client.close()
            self._client = None
            self.heartbeats.detach()
            self._control = None

    def close(self) -> None:
        self.heartbeats.close()

    def epoch_cache(self) -> tuple[int, list, int]:
        """(broker id as registered, epoch entries, max offset): GET_BROKER_EPOCH_CACHE."""
        control = self._control
        written = control.written_position if control is not None else 0
        registered_id = MASTER_BROKER_ID if self.running.role is Role.MASTER \
            else self.broker_id
        return registered_id, EpochFile.load(self.epoch_path).entries, written

    # --- registration and role decisions ----------------------------------------------------
    async def _main_loop(self) -> None:
        """Register (once per broker life), then follow the controller's view of the set:
        while no master is known ask to be elected every 5 s (Java retries startBasicService
        so), and read the set every syncBrokerMetadataPeriod (every second while fenced)."""
        # The controller's refusals are logged where they are met; a round that raises
        # anything else is logged and retried (pybroker/tasks.py).
        rounds = Rounds("controller registration and role", logger=log)
        while not self.registered:
            with rounds:
                if await self._start_basic_service():
                    break
            await asyncio.sleep(_RETRY_S)
        next_elect_ms = clock.now_ms() + _RETRY_S * 1000
        await asyncio.sleep(_FIRST_SYNC_DELAY_S if self.running.role is not Role.FENCED
                            else 1.0)
        period_s = self.config.broker.sync_broker_metadata_period / 1000
        while True:
            with rounds:
                await self._sync_broker_metadata()
                if self.master_broker_id is None and clock.now_ms() >= next_elect_ms:
                    next_elect_ms = clock.now_ms() + _RETRY_S * 1000
                    await self._beat()
                    await self._elect()
            await asyncio.sleep(period_s if self.running.role is not Role.FENCED else 1.0)

    async def _start_basic_service(self) -> bool:
        """Java's startBasicService: register (up to 5 tries), heartbeat, then follow the
        master or ask to be elected."""
        client = self._client
        assert client is not None
        if client.leader is None and not await client.update_leader():
            log.warning("no controller of %s answers", self.config.broker.controller_addr)
            return False
        for _ in range(5):
            if await self._register():
                break
            await asyncio.sleep(random.random())     # Java: spread concurrent registrations
        else:
            log.error("registering with the controller failed 5 times")
            return False
        self.registered = True
        await self._beat()
        if self.master_broker_id is not None:
            return True
        return await self._elect()

    async def _register(self) -> bool:
        client, broker = self._client, self.config.broker
        assert client is not None
        state, identity = broker_identity.register_state(self.identity_path)
        if identity is not None and (identity.cluster_name, identity.broker_name) != \
                (broker.broker_cluster_name, broker.broker_name):
            log.error("%s names %s/%s, the config %s/%s: fix the config or the file",
                      self.identity_path, identity.cluster_name, identity.broker_name,
                      broker.broker_cluster_name, broker.broker_name)
            return False
        try:
            identity = await self._apply_identity(state, identity)
            if identity is None:
                return False
            self.broker_id = identity.broker_id
            header, members = await client.register(broker.broker_cluster_name,
                                                    broker.broker_name, self.broker_id,
                                                    self.broker_addr)
        except ControllerError as error:
            log.warning("register with the controller: %s", error)
            return False
        log.info("registered with the controller as broker id %d of %s (master %s, epoch %s)",
                 self.broker_id, broker.broker_name, header.master_broker_id,
                 header.master_epoch)
        if header.master_broker_id is not None:
            self._on_master_info(header.master_broker_id, header.master_address,
                                 header.master_epoch or 0, members.members,
                                 header.sync_state_set_epoch or members.epoch)
        return True

    async def _apply_identity(self, state, identity):
        """The register-state steps of the brokerIdentity files (resumable after a crash)."""
        client, broker = self._client, self.config.broker
        assert client is not None
        cluster, name = broker.broker_cluster_name, broker.broker_name
        if state is broker_identity.RegisterState.INITIAL:
            next_id = await client.next_broker_id(cluster, name)
            identity = broker_identity.BrokerIdentity(
                cluster, name, next_id, f"{self.broker_addr};{clock.now_ms()}")
            broker_identity.write_application(self.identity_path, identity)
            state = broker_identity.RegisterState.CREATE_TEMP_METADATA_FILE_DONE
        if state is broker_identity.RegisterState.CREATE_TEMP_METADATA_FILE_DONE:
            try:
                await client.apply_broker_id(cluster, name, identity.broker_id,
                                             identity.register_check_code)
            except ControllerError as error:
                log.warning("broker id %d not applied (%s): asking for another",
                            identity.broker_id, error)
                broker_identity.clear_application(self.identity_path)
                return None
            identity = dataclasses.replace(identity, register_check_code=None)
            broker_identity.write_identity(self.identity_path, identity)
            broker_identity.clear_application(self.identity_path)
        return identity

    async def _elect(self) -> bool:
        """Java's brokerElect: ask the controller to elect (this broker if it may)."""
        client, broker = self._client, self.config.broker
        assert client is not None
        try:
            header, members = await client.elect(broker.broker_cluster_name, broker.broker_name,
                                                 self.broker_id)
        except ControllerError as error:
            log.warning("elect master of %s: %s", broker.broker_name, error)
            return False
        if header.master_broker_id is None or not header.master_address:
            log.warning("no master in %s yet", broker.broker_name)
            return False
        self._on_master_info(header.master_broker_id, header.master_address,
                             header.master_epoch or 0, members, header.sync_state_set_epoch or 0)
        return True

    async def _sync_broker_metadata(self) -> None:
        """Java's schedulingSyncBrokerMetadata: the controller's view of the broker set."""
        client = self._client
        assert client is not None
        try:
            header, members = await client.replica_info(self.config.broker.broker_name)
        except ControllerError as error:
            log.warning("replica info of %s: %s", self.config.broker.broker_name, error)
            if error.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                await self._register()
            return
        epoch = header.master_epoch or 0
        if epoch > self.master_epoch and (header.master_broker_id is None
                                          or not header.master_address):
            await self._elect()
        elif header.master_broker_id is not None and header.master_address:
            self._on_master_info(header.master_broker_id, header.master_address, epoch,
                                 members.members, members.epoch)

    def on_role_notification(self, master_broker_id: int | None, master_address: str | None,
                             master_epoch: int | None, set_epoch: int | None, members) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED from the controller (the metadata service calls it)."""
        log.info("controller: master of %s is %s (%s) at epoch %s, SyncStateSet %s",
                 self.config.broker.broker_name, master_broker_id, master_address,
                 master_epoch, sorted(members))
        if not self.registered:
            return             # the registration's answer will say the same
        if master_broker_id is not None and master_address and master_epoch is not None:
            self._on_master_info(master_broker_id, master_address, master_epoch, members,
                                 set_epoch or 0)

    def _on_master_info(self, master_id: int, master_address: str | None, epoch: int,
                        members, set_epoch: int) -> None:
        """Java's changeBrokerRole / changeSyncStateSet."""
        if epoch > self.master_epoch:
            if master_id == self.broker_id:
                self._change_to_master(epoch, frozenset(members), set_epoch)
            else:
                self._change_to_slave(master_id, master_address, epoch)
        elif epoch == self.master_epoch and self.running.role is Role.MASTER:
            self._confirm_sync_state(frozenset(members), set_epoch)

    def _change_to_master(self, epoch: int, members: frozenset[int], set_epoch: int) -> None:
        log.info("begin to change to master, broker %s id %d, new epoch %d",
                 self.config.broker.broker_name, self.broker_id, epoch)
        self.master_epoch, self.master_broker_id = epoch, self.broker_id
        self.master_address = self.broker_addr
        self.sync = sync_state.SyncStateSet(members | {self.broker_id}, set_epoch)
        self._decide(ReplicaRole(Role.MASTER, self.broker_id, epoch, self.broker_id,
                                 self.broker_addr))

    def _change_to_slave(self, master_id: int, master_address: str | None, epoch: int) -> None:
        log.info("begin to change to slave, broker %s id %d, master %d (%s), epoch %d",
                 self.config.broker.broker_name, self.broker_id, master_id, master_address,
                 epoch)
        self.master_epoch = epoch
        unchanged = (master_id == self.master_broker_id and self.running.role is Role.SLAVE
                     and master_address == self.running.master_address)
        self.master_broker_id, self.master_address = master_id, master_address
        if unchanged:          # Java's changeToSlaveWhenMasterNotChange: nothing to restart
            self.decided = self.running = dataclasses.replace(self.running, master_epoch=epoch)
            return
        self._decide(ReplicaRole(Role.SLAVE, self.broker_id, epoch, master_id, master_address))

    def _decide(self, role: ReplicaRole) -> None:
        self.decided = role
        if role != self.running:
            self.role_changes_total += 1
            log.warning("role of %s changes to %s (epoch %d)",
                        self.config.broker.broker_name, role.role.value, role.master_epoch)
            self._restart()

    # --- heartbeats and controller metadata ------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        interval_s = self.config.broker.broker_heartbeat_interval / 1000
        rounds = Rounds("controller heartbeats", logger=log)
        while True:
            if self.registered:
                with rounds:
                    await self._beat()
            await asyncio.sleep(interval_s)

    async def _beat(self) -> None:
        control, broker = self._control, self.config.broker
        written = control.written_position if control is not None else 0
        # Java's confirm offset (the ha worker publishes it; unbounded: the written end).
        confirm = min(control.confirm_position, written) if control is not None else 0
        try:
            last_epoch = EpochFile.load(self.epoch_path).last_epoch()
        except Exception as error:       # noqa: BLE001 - a heartbeat must not stop the loop
            log.error("epoch file unreadable: %s", error)
            last_epoch = -1
        await self.heartbeats.beat({
            "cluster_name": broker.broker_cluster_name, "broker_addr": self.broker_addr,
            "broker_name": broker.broker_name, "broker_id": self.broker_id,
            "epoch": last_epoch, "max_offset": written, "confirm_offset": confirm,
            "heartbeat_timeout_mills": broker.controller_heart_beat_timeout_mills,
            "election_priority": broker.broker_election_priority})

    async def _controller_metadata_loop(self) -> None:
        period_s = self.config.broker.sync_controller_metadata_period / 1000
        rounds = Rounds("controller leader lookup", logger=log)
        while True:
            await asyncio.sleep(period_s)
            assert self._client is not None
            with rounds:
                await self._client.update_leader()

    # --- the master's SyncStateSet ---------------------------------------------------------
    def publish_sync_state(self) -> None:
        """The members acknowledgements wait for, into the control block (a master only);
        the ha worker is woken to apply them."""
        control = self._control
        if control is None or self.running.role is not Role.MASTER:
            return
        required = (self.sync.required | self.joining) - {self.broker_id}
        control.publish_sync_state(required, self.sync.in_sync_count)
        if self._ha_wake is not None:
            self._ha_wake.signal()

    def _confirm_sync_state(self, members: frozenset[int], set_epoch: int) -> None:
        confirmed = self.sync.confirm(members, set_epoch)
        if confirmed is not self.sync:
            log.info("SyncStateSet of %s changed from %s to %s (epoch %d)",
                     self.config.broker.broker_name, sorted(self.sync.confirmed),
                     sorted(confirmed.confirmed), set_epoch)
            self.sync = confirmed
            self.joining -= confirmed.confirmed
            self.publish_sync_state()

    async def _sync_state_loop(self) -> None:
        """Java's checkSyncStateSetAndDoReport (every checkSyncStateSetPeriod) and the
        immediate reactions to slaves joining or lost."""
        store, broker = self.config.store, self.config.broker
        # A new generation's slaves reconnect within a second or two: not taken out before
        # they could (an elected master's set is itself alone anyway).
        next_check_ms = clock.now_ms() + max(broker.check_sync_state_set_period,
                                             store.ha_max_time_slave_not_catchup)
        rounds = Rounds("SyncStateSet upkeep", logger=log)
        while True:
            await asyncio.sleep(_SYNC_STATE_POLL_S)
            if self._altering or self._control is None or self._frozen:
                continue
            with rounds:
                now = clock.now_ms()
                lines = self._control.ha_slave_lines()
                self._seen.update(line["broker_id"] for line in lines if line["broker_id"])
                await self._maybe_expand(lines, now)
                connected = {line["broker_id"] for line in lines}
                members = self.sync.confirmed
                lost = {member for member in members
                        if member in self._seen and member not in connected}
                wanted = members - lost
                if now >= next_check_ms:
                    next_check_ms = now + broker.check_sync_state_set_period
                    wanted = sync_state.shrink(wanted, lines, now,
                                               store.ha_max_time_slave_not_catchup,
                                               self.broker_id)
                if wanted != members:
                    await self._alter(wanted | {self.broker_id})

    def freeze(self) -> None:
        """The generation is stopping: its SyncStateSet is no longer altered. Its ha worker
        stops before this task does, so the slaves' disconnections that follow are this
        broker's own doing (Java's removeConnection leaves the set alone once the store is
        shut down); taking them out would leave a set the controller can elect nobody from."""
        self._frozen = True

    async def _maybe_expand(self, lines, now: int) -> None:
        store = self.config.store
        last = EpochFile.load(self.epoch_path).last()
        epoch_start = last.start_offset if last is not None else 0
        candidates = sync_state.expansion_candidates(
            self.sync.required, lines, now, store.ha_max_time_slave_not_catchup, epoch_start)
        connected = {line["broker_id"] for line in lines}
        joining = (self.joining & connected) | candidates
        if joining != self.joining:
            self.joining = joining
            self.publish_sync_state()
        ready = {member for member in self.joining if sync_state.ready_to_join(member, lines)}
        if ready:
            await self._alter(self.sync.confirmed | ready)

    async def _alter(self, members: frozenset[int]) -> None:
        """Propose ``members`` (published as required until the controller answers)."""
        client = self._client
        assert client is not None
        self.sync = self.sync.propose(members)
        self.publish_sync_state()
        self._altering = True
        try:
            answer = await client.alter_sync_state_set(
                self.config.broker.broker_name, self.broker_id, self.master_epoch, members,
                self.sync.epoch)
        except ControllerError as error:
            log.warning("alter SyncStateSet of %s to %s: %s", self.config.broker.broker_name,
                        sorted(members), error)
            answer = None
        finally:
            self._altering = False
        if answer is not None:
            self._confirm_sync_state(answer.members, answer.epoch)
        if self.sync.proposed is not None:
            # Refused, or answered with no newer set: withdrawn, so that a slave proposed here
            # is a candidate again (sync_state.py); while it stays connected and joining,
            # acknowledgements still wait for it.
            self.sync = self.sync.withdraw()
            self.publish_sync_state()
