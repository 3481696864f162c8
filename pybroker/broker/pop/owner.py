# The supervisor's POP duties: the shared table's life, offset harvest, order records, revive.
"""What the supervisor does for POP (docs/architecture/pop.md).

* At start: a table a killed broker left in ``<store>/run/pop`` gives its offsets and order
  records to consumerOffset.json and consumerOrderInfo.json (they are newer), then a fresh table
  of popSlotsMax slots is made; every generation starts with no lock held and no POP held.
* While serving: the pop offsets are harvested into the consumer offsets every
  HARVEST_INTERVAL_MS; consumerOrderInfo.json is written with consumerOffset.json; the revive
  service (master only, with the timer) runs its rounds, check-points due by how far the timer
  worker has delivered (its control-block line).
* At a clean stop: a last harvest, both documents written, the table file removed.
* QUERY_ASSIGNMENT's topic routes (broker/pop/assignment.py) live as long as the supervisor.
"""
import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from pybroker import clock
from pybroker.broker.pop.assignment import TopicRoutes
from pybroker.broker.pop.directory import (HARVEST_INTERVAL_MS, PopDirectory, load_order_infos,
                                           recover_table)
from pybroker.broker.pop.revive import ReviveService
from pybroker.broker.timer import delivered_until_ms
from pybroker.broker.timer_message import TIMER_TOPIC
from pybroker.remoting.tls import outgoing_tls
from pybroker.store import paths
from pybroker.store.pop_table import PopTable
from pybroker.tasks import Rounds

__all__ = ["PopOwner", "ORDER_INFO_CONFIG", "pop_table_path"]

log = logging.getLogger("pybroker.broker.pop")

ORDER_INFO_CONFIG = "consumerOrderInfo.json"
_REVIVE_TICK_S = 0.1


def pop_table_path(store_root: str) -> str:
    """``<root>/run/pop``: the shared POP state (store/pop_table.py)."""
    return os.path.join(paths.run_dir(store_root), "pop")


class PopOwner:
    """The table, its directory, the revive service and QUERY_ASSIGNMENT's topic routes of one
    supervisor (``metadata``: its MetadataState; ``current_config()``: the settings now, which
    UPDATE_BROKER_CONFIG may change)."""

    def __init__(self, config, metadata, current_config: Callable[[], Any] | None = None):
        self.config = config
        self.metadata = metadata
        now_config = current_config or (lambda: config)
        self.routes = TopicRoutes(
            lambda: [f"{host}:{port}" for host, port in now_config().derived.namesrv_addresses],
            outgoing_tls(config),
            lambda: now_config().broker.load_balance_poll_name_server_interval)
        root = config.store.store_path_root_dir
        self.path = pop_table_path(root)
        order_path = paths.config_path(root, ORDER_INFO_CONFIG)
        orders = load_order_infos(order_path)
        if os.path.exists(self.path):
            if recover_table(self.path, metadata.offsets, orders):
                metadata.offsets.persist()
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        self.table = PopTable.create(self.path, config.broker.pop_slots_max)
        self.directory = PopDirectory(self.table, metadata.offsets, order_path, orders,
                                      clock.now_ms, self._exists)
        self.directory.persist_order_infos()
        metadata.offsets.listener = self.directory.offset_committed
        self.revive: ReviveService | None = None

    def _exists(self, topic: str, group: str, queue_id: int) -> bool:
        topic_config = self.metadata.topic_config(topic)
        return topic_config is not None and queue_id < topic_config.read_queue_nums and \
            self.metadata.groups.has_subscription_group(group)

    def new_generation(self) -> None:
        """Before a generation forks: the previous one's processes are gone."""
        held = self.table.clear_locks()
        if held:
            log.warning("%d POP queue locks of the previous generation released", held)
        self.table.clear_held()

    async def harvest_forever(self) -> None:
        """Pop offsets into the consumer offsets, every HARVEST_INTERVAL_MS, for as long as
        the generation's event loop runs; at its end the loop's connections (the topic
        routes') are closed."""
        rounds = Rounds("POP offset harvest", logger=log)
        try:
            while True:
                await asyncio.sleep(rounds.next_delay_s(HARVEST_INTERVAL_MS / 1000.0))
                with rounds:
                    self.directory.harvest()
        finally:
            self.routes.close_connections()

    def persist(self) -> None:
        """Harvest and write consumerOrderInfo.json (with consumerOffset.json's period)."""
        self.directory.harvest()
        self.directory.persist_order_infos()

    async def revive_forever(self, attachment, metadata_changed: Callable[[], Any]) -> None:
        """The revive service's rounds (master only), through the supervisor's own ring;
        none without the timer, which delivers its records (Java skips revive then too).
        ``metadata_changed()`` after each round: the retry topics a round created go to the
        workers then (cheap when nothing changed), not at the next periodic push, 10 s
        later (a POP of the retry topic would not see its first revived messages until
        then)."""
        if not self.config.store.timer_wheel_enable:
            log.warning("skip revive topic because timerWheelEnable is false")
            return
        control = attachment.control
        timer_line, reader = control.timer(), attachment.reader

        def timer_covered_ms() -> int:
            read_time_ms, offset = timer_line.read_time_ms, timer_line.queue_offset
            last_store_ms = timer_line.last_enqueue_store_ms
            return delivered_until_ms(read_time_ms, offset, last_store_ms,
                                      reader.get_max_offset_in_queue(TIMER_TOPIC, 0))
        self.revive = ReviveService(
            self.config, reader, attachment.putter, self.metadata, self.directory,
            attachment.store_host, clock.now_ms, lambda: control.written_position,
            lambda: control.dispatched_position, timer_covered_ms)
        revive, rounds = self.revive, Rounds("POP revive", logger=log)
        try:
            while True:
                with rounds:
                    await revive.run_once()
                    metadata_changed()
                await asyncio.sleep(rounds.next_delay_s(_REVIVE_TICK_S))
        finally:
            self.revive = None

    def close(self, clean: bool) -> None:
        """The broker stops: a last harvest, the order records written; the table file goes
        after a clean stop (after a failed one the next start recovers from it)."""
        self.persist()
        self.table.close()
        if clean:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
