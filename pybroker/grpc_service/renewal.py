# The proxy's receipt-handle renewal: what a push consumer received stays invisible while it works.
"""Auto-renew of received messages (the Java 5.3.3 proxy's DefaultReceiptHandleManager and
ReceiptHandleGroup, with its ProxyConfig keys).

The SDKs' PushConsumer receives with ``auto_renew``: the receive's invisible time is then
``defaultInvisibleTimeMills`` (60 s) and the endpoint, not the client, keeps the message
invisible for as long as the client has not acked it:

* every message such a receive delivers is kept per (client, group), under its message id and
  the (broker, queue, queue offset) of its handle (Java's HandleKey);
* every ``renewSchedulePeriodMillis`` (5 s) each kept message whose handle becomes visible
  within ``renewAheadTimeMillis`` (10 s) gets CHANGE_MESSAGE_INVISIBLETIME for the next step
  of Java's RenewStrategyPolicy (1, 3, 5, 10, 30, 60 minutes, then 60 each time) and keeps the
  new handle; past ``renewMaxTimeMillis`` (3 h) after its first retrieval it gets the group's
  retry delay for its reconsume count instead and is let go; a renewal that fails is retried
  at the next scans, ``maxRenewRetryTimes`` (3) times, unless the handle is invalid;
* an ack, a change of invisible duration or a forward to the DLQ of a kept message takes it
  out and uses its newest handle (the client only knows the first);
* a client no longer in its group's consumer registry (NotifyClientTermination, or no
  heartbeat for the registry's channel expiry) has its kept messages made visible again
  ``invisibleTimeMillisWhenClear`` (1 s) later, as has everything at the worker's stop.

A kept message is worked on by one coroutine at a time (an asyncio lock per message, Java's
HandleData semaphore, with its 3 s bound), so an ack that comes during a renewal gets the
renewal's new handle. The table lives in the gRPC worker that served the receive (a client's
calls share one HTTP/2 connection, so one worker); a worker that dies forgets it, and its
messages come back when their last invisible time ends, as a proxy's do when it dies.
"""
import asyncio
import dataclasses
import logging
import time

import orjson

from pybroker.broker.client_manage import NO_CONSUMER_REMARK
from pybroker.grpc_service.consumer import decode_handle
from pybroker.grpc_service.request_context import RequestContext
from pybroker.grpc_service.status import Code, GrpcRefused
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.tasks import start_task, within

__all__ = ["Renewals", "RENEW_STEPS_MS", "registry_has"]

log = logging.getLogger("pybroker.grpc.renewal")

# RenewStrategyPolicy: the invisible time given at the n-th renewal (the last repeats).
RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
LOCK_TIMEOUT_S = 3.0           # lockTimeoutMsInHandleGroup
STOP_CLEAR_BOUND_S = 1.0       # the worker's stop waits this long for the clears


@dataclasses.dataclass
class _Kept:
    """One received message kept invisible (Java's MessageReceiptHandle)."""
    topic: str
    message_id: str
    reconsume_times: int
    first_retrieve_ms: int
    handle: str                       # the newest handle
    renew_times: int = 0
    retries: int = 0
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    gone: bool = False                # taken out (acked, changed, let go)


def _handle_key(handle: str) -> tuple[str, int, int] | None:
    """(broker, queue id, queue offset) of a gRPC receipt handle, None if it does not parse."""
    try:
        decoded = decode_handle(handle)
    except Exception:  # noqa: BLE001 (any malformed handle: not kept here)
        return None
    return decoded.broker_name, decoded.queue_id, decoded.offset


class Renewals:
    """The kept messages of one gRPC worker, by the keys of ``config_source()`` (its GrpcConfig,
    read at each use). ``change(rctx, handle, group, topic, ms)`` changes
    a handle's invisible time and returns the new handle, None when the broker refused it;
    GrpcRefused when the handle is invalid (expired). ``online(rctx, group)`` says whether the
    client is still in the group's registry. ``retry_delay_ms(group, reconsume_times)`` is the
    group's retry policy."""

    def __init__(self, config_source, change, online, retry_delay_ms):
        self._config_source = config_source       # () -> the worker's current GrpcConfig
        self._change = change
        self._online = online
        self._retry_delay_ms = retry_delay_ms
        # (client id, group) -> (the client's context, {(message id, handle key): kept})
        self.groups: dict[tuple[str, str], tuple[RequestContext, dict]] = {}

    @property
    def config(self):
        return self._config_source()

    @property
    def enabled(self) -> bool:
        return self.config.enable_proxy_auto_renew

    def kept_count(self) -> int:
        return sum(len(kept) for _, kept in self.groups.values())

    def keeps(self, client_id: str, group: str) -> bool:
        """Whether messages of ``client_id`` in ``group`` are kept (their handles may be
        replaced at :meth:`take`; without any, take answers the handle given)."""
        return (client_id, group) in self.groups

    # --- what the activities call ---------------------------------------------------------
    def add(self, rctx: RequestContext, group: str, topic: str, message: pb.Message) -> None:
        """Keep a message a receive with auto-renew delivered."""
        system = message.system_properties
        key = _handle_key(system.receipt_handle)
        if key is None:
            return
        first_ms = decode_handle(system.receipt_handle).retrieve_time
        _, kept = self.groups.setdefault((rctx.client_id, group), (rctx, {}))
        kept[(system.message_id, key)] = _Kept(topic, system.message_id,
                                               max(system.delivery_attempt - 1, 0), first_ms,
                                               system.receipt_handle)

    async def take(self, rctx: RequestContext, group: str, message_id: str,
                   handle: str) -> str:
        """The handle to use for an ack, change or forward of ``handle``: the kept message's
        newest, or ``handle`` itself when it is not kept; the message is kept no longer.
        GrpcRefused (INTERNAL_SERVER_ERROR) when a renewal holds it past the lock bound."""
        entry = self.groups.get((rctx.client_id, group))
        if entry is None:                   # nothing kept for the client's group: no parse
            return handle
        key = _handle_key(handle)
        if key is None:
            return handle
        kept_map = entry[1]
        kept = kept_map.get((message_id, key))
        if kept is None:
            return handle
        try:
            await within(kept.lock.acquire(), LOCK_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise GrpcRefused(Code.INTERNAL_SERVER_ERROR,
                              "try to remove and get handle failed") from None
        try:
            if kept.gone:
                return handle
            kept.gone = True
            self._forget(rctx.client_id, group, (message_id, key), kept)
            return kept.handle
        finally:
            kept.lock.release()

    def client_gone(self, client_id: str, group: str) -> None:
        """NotifyClientTermination: the client's kept messages come back soon."""
        entry = self.groups.pop((client_id, group), None)
        if entry is not None:
            start_task(self._clear(group, *entry), "clearing a gone client's kept messages",
                       None, log)

    # --- the schedule ---------------------------------------------------------------------
    async def run(self) -> None:
        """Scan every renewSchedulePeriodMillis until cancelled."""
        period_s = self.config.renew_schedule_period_millis / 1000
        while True:
            await asyncio.sleep(period_s)
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 (the next scan tries again)
                log.exception("receipt handle renewal scan failed")

    async def scan(self) -> None:
        """One pass: clear the groups of clients gone offline, renew what is due."""
        for (client_id, group), (rctx, kept) in list(self.groups.items()):
            if not kept:
                self.groups.pop((client_id, group), None)
                continue
            if not await self._online(rctx, group):
                if self.groups.pop((client_id, group), None) is not None:
                    await self._clear(group, rctx, kept)
                continue
            ahead_ms = self.config.renew_ahead_time_millis
            now_ms = time.time_ns() // 1_000_000
            for key, item in list(kept.items()):
                if _visible_at_ms(item.handle) - now_ms <= ahead_ms:
                    await self._renew(rctx, group, key, item)

    async def _renew(self, rctx: RequestContext, group: str, key, item: _Kept) -> None:
        async with item.lock:
            if item.gone:
                return
            if item.retries >= self.config.max_renew_retry_times:
                log.warning("handle has exceeded max renew retry times, no longer renewed: "
                            "group %s message %s", group, item.message_id)
                self._let_go(rctx.client_id, group, key, item)
                return
            now_ms = time.time_ns() // 1_000_000
            if now_ms - item.first_retrieve_ms >= self.config.renew_max_time_millis:
                delay_ms = self._retry_delay_ms(group, item.reconsume_times)
                try:
                    await self._change(rctx, item.handle, group, item.topic, delay_ms)
                except Exception as error:  # noqa: BLE001 (let go either way, as Java)
                    log.warning("stop renewing %s: %s", item.message_id, error)
                self._let_go(rctx.client_id, group, key, item)
                return
            step = RENEW_STEPS_MS[min(item.renew_times, len(RENEW_STEPS_MS) - 1)]
            try:
                new_handle = await self._change(rctx, item.handle, group, item.topic, step)
            except GrpcRefused as refused:          # an invalid (expired) handle: let go
                log.warning("renewal of %s refused: %s", item.message_id, refused.message)
                self._let_go(rctx.client_id, group, key, item)
                return
            except Exception as error:  # noqa: BLE001 (retried at the next scans)
                item.retries += 1
                log.warning("renewal of %s failed (%d): %s", item.message_id, item.retries,
                            error)
                return
            if new_handle is None:                  # the broker's answer was not SUCCESS
                self._let_go(rctx.client_id, group, key, item)
                return
            item.handle = new_handle
            item.retries = 0
            item.renew_times += 1

    async def _clear(self, group: str, rctx: RequestContext, kept: dict) -> None:
        """Make a group's kept messages visible invisibleTimeMillisWhenClear from now."""
        clear_ms = self.config.invisible_time_millis_when_clear
        for item in list(kept.values()):
            async with item.lock:
                if item.gone:
                    continue
                item.gone = True
                try:
                    await self._change(rctx, item.handle, group, item.topic, clear_ms)
                except Exception as error:  # noqa: BLE001 (it comes back at its time anyway)
                    log.info("clearing %s: %s", item.message_id, error)
        kept.clear()

    async def stop(self) -> None:
        """The worker stops: every kept message comes back soon (bounded)."""
        groups, self.groups = self.groups, {}
        clears = [self._clear(group, rctx, kept)
                  for (_, group), (rctx, kept) in groups.items()]
        if clears:
            try:
                await within(asyncio.gather(*clears, return_exceptions=True), STOP_CLEAR_BOUND_S)
            except asyncio.TimeoutError:
                log.warning("stop: kept messages not all cleared within %.0f s",
                            STOP_CLEAR_BOUND_S)

    def _let_go(self, client_id: str, group: str, key, item: _Kept) -> None:
        item.gone = True
        self._forget(client_id, group, key, item)

    def _forget(self, client_id: str, group: str, key, item: _Kept) -> None:
        entry = self.groups.get((client_id, group))
        if entry is not None and entry[1].get(key) is item:
            del entry[1][key]


def _visible_at_ms(handle: str) -> int:
    decoded = decode_handle(handle)
    return decoded.retrieve_time + decoded.invisible_time


async def registry_has(forward, rctx: RequestContext, group: str) -> bool:
    """Whether the group's consumer registry still lists the client (Java's findChannel).
    A group with no consumer left is answered SYSTEM_ERROR "no consumer for this group"; any
    other failure (a busy link) says nothing, and clears nothing."""
    answer = await forward(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group},
                           None, rctx)
    if answer.code == ResponseCode.SYSTEM_ERROR and \
            (answer.remark or "").startswith(NO_CONSUMER_REMARK):
        return False
    if answer.code != ResponseCode.SUCCESS:
        return True
    try:
        listed = orjson.loads(bytes(answer.body or b"{}")).get("consumerIdList") or []
    except orjson.JSONDecodeError:
        return True
    return rctx.client_id in listed
