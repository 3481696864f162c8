# The ha worker process: master (serves slaves) or slave (replicates), by brokerRole.
"""Entry of the ``ha`` worker (design.md §2; docs/architecture/replication.md).

On ASYNC_MASTER and SYNC_MASTER it runs :class:`pybroker.proc.ha_master.HAMasterService` on the
HA port the supervisor bound; on SLAVE it runs :class:`pybroker.proc.ha_slave.HASlaveClient`,
which is then the CommitLog's only writer (no appender is forked on a slave).

Stopping: the master worker stops on the supervisor's stop signal (SIGUSR1; SIGTERM and
SIGINT to the process group are ignored by workers, see :mod:`pybroker.proc.children`; it only
reads, so the supervisor stops it with the remoting workers); the slave worker is the data
plane's writer and stops like the appender, when ``broker_state`` turns STOPPING (its eventfd
is signalled) or on the stop signal,
after publishing what it appended. The supervisor also signals the eventfd when it wrote a
new master address (``run/ha-master``). Exit status 0, or
:data:`pybroker.proc.ha_slave.EXIT_TRUNCATE` when the slave recorded a truncation that the
next generation applies before recovery.
"""
import asyncio
import logging

from pybroker.config import BrokerRole
from pybroker.proc.autoswitch_master import AutoSwitchMasterService
from pybroker.proc.autoswitch_slave import AutoSwitchSlaveClient
from pybroker.proc.children import STOP_SIGNAL, accept_stop
from pybroker.proc.ha_access import HAAccess
from pybroker.proc.ha_master import HAMasterService
from pybroker.proc.ha_slave import HASlaveClient
from pybroker.store.control_block import BrokerState

log = logging.getLogger("pybroker.proc.ha")

__all__ = ["run_ha", "is_slave"]


def is_slave(config) -> bool:
    return config.store.broker_role == BrokerRole.SLAVE


def run_ha(config, control, wakes, listener=None) -> int:
    """Main of the forked ha worker; returns its exit status. In controller mode it speaks
    AutoSwitchHA (pybroker/proc/autoswitch_master.py, autoswitch_slave.py)."""
    controller_mode = config.broker.enable_controller_mode
    # The HA port's admission (proc/ha_access.py) in both protocols.
    if is_slave(config):
        access = HAAccess.from_config(config, master=False)
        client = AutoSwitchSlaveClient(config.store, config.broker.broker_id, control, wakes,
                                       access=access) \
            if controller_mode else HASlaveClient(config.store, control, wakes, access=access)
        return asyncio.run(_run_slave(client, control, wakes))
    access = HAAccess.from_config(config, master=True)
    service = AutoSwitchMasterService(config.store, control, wakes, listener, access=access) \
        if controller_mode else HAMasterService(config.store, control, wakes, listener,
                                                access=access)
    return asyncio.run(_run_master(service))


async def _run_master(service) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(STOP_SIGNAL, stop.set)
    accept_stop()
    await service.run(stop)
    log.info("ha (master): stopped")
    return 0


async def _run_slave(client, control, wakes) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    address_changed = asyncio.Event()
    loop.add_signal_handler(STOP_SIGNAL, stop.set)
    accept_stop()

    def readable() -> None:
        wakes.ha.consume()
        if control.broker_state >= BrokerState.STOPPING:
            stop.set()
        else:
            address_changed.set()
    loop.add_reader(wakes.ha.fd, readable)
    replicate = loop.create_task(client.run(address_changed))  # tidy: allow (awaited)
    stopping = loop.create_task(stop.wait())  # tidy: allow (awaited)
    try:
        await asyncio.wait((replicate, stopping), return_when=asyncio.FIRST_COMPLETED)
        if replicate.done():
            return replicate.result()
        replicate.cancel()
        try:
            await replicate
        except asyncio.CancelledError:
            pass
        dropped = client.replica.drop_partial()
        client.publish()
        log.info("ha (slave): stopping at %d%s", client.replica.record_end,
                 f" (a record's first {dropped} bytes dropped)" if dropped else "")
        return 0
    finally:
        stopping.cancel()
        loop.remove_reader(wakes.ha.fd)
        client.close()
