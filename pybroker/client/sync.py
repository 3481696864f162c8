# Blocking facade: the asyncio clients with the same names, driven by a private loop thread.
"""Blocking versions of :class:`Producer`, :class:`PushConsumer`, :class:`LitePullConsumer`
and :class:`Admin`, for code without an event loop.

Each object runs its own asyncio loop in one daemon thread; every method submits the asyncio
method of the same name and blocks until it finishes, at most ``call_timeout_ms`` (then
RequestTimeoutError). The asyncio methods have their own, shorter timeouts, so this cap only
matters if something is stuck. :meth:`shutdown` stops the loop and joins the thread.
A push consumer's plain-function listener runs in the consumer's thread pool, as with asyncio.
"""
import asyncio
import concurrent.futures
import threading
from typing import Any

from pybroker.client import admin as _admin
from pybroker.client import consumer as _consumer
from pybroker.client import pop_consumer as _pop_consumer
from pybroker.client import producer as _producer
from pybroker.client import pull_consumer as _pull_consumer
from pybroker.client import transaction as _transaction
from pybroker.client.errors import ClientStateError, RequestTimeoutError

CALL_TIMEOUT_MS_DEFAULT = 120_000
THREAD_JOIN_TIMEOUT_MS = 5000


class _Blocking:
    """Owns the loop thread and the wrapped asyncio object."""

    _async_class: Any = None
    _methods: tuple[str, ...] = ()

    def __init__(self, *args: Any, call_timeout_ms: int = CALL_TIMEOUT_MS_DEFAULT,
                 **kwargs: Any):
        self.call_timeout_ms = call_timeout_ms
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"pybroker-{type(self).__name__}")
        self._thread.start()
        self.target = self._async_class(*args, **kwargs)

    def _submit(self, coroutine) -> concurrent.futures.Future:
        if not self._thread.is_alive():
            coroutine.close()
            raise ClientStateError(f"{type(self).__name__} is shut down")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _call(self, coroutine) -> Any:
        future = self._submit(coroutine)
        try:
            return future.result(self.call_timeout_ms / 1000)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RequestTimeoutError(f"call did not finish in {self.call_timeout_ms} ms") \
                from None

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._methods:
            method = getattr(self.target, name)
            return lambda *args, **kwargs: self._call(method(*args, **kwargs))
        return getattr(self.target, name)

    def start(self) -> None:
        """Start the wrapped client."""
        self._call(self.target.start())

    def shutdown(self) -> None:
        """Shut the wrapped client down, then stop and join the loop thread."""
        if not self._thread.is_alive():
            return
        try:
            self._call(self.target.shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(THREAD_JOIN_TIMEOUT_MS / 1000)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()


class Producer(_Blocking):
    """Blocking :class:`pybroker.client.producer.Producer` (same arguments)."""
    _async_class = _producer.Producer
    _methods: tuple[str, ...] = ("send", "send_oneway", "send_batch")

    def send_async(self, message, callback=None, **kwargs) -> concurrent.futures.Future:
        """Start a send; returns a concurrent Future of the SendResult. ``callback(result,
        error)`` runs in the loop thread."""
        async def run():
            return await self.target.send_async(message, callback, **kwargs)
        return self._submit(run())


class TransactionProducer(Producer):
    """Blocking :class:`pybroker.client.transaction.TransactionProducer` (same arguments);
    plain-function listener callbacks run in its thread pool."""
    _async_class = _transaction.TransactionProducer
    _methods = Producer._methods + ("send_message_in_transaction",)


class PushConsumer(_Blocking):
    """Blocking :class:`pybroker.client.consumer.PushConsumer` (same arguments)."""
    _async_class = _consumer.PushConsumer
    _methods = ("rebalance", "persist_offsets")


class LitePullConsumer(_Blocking):
    """Blocking :class:`pybroker.client.pull_consumer.LitePullConsumer` (same arguments)."""
    _async_class = _pull_consumer.LitePullConsumer
    _methods = ("rebalance", "poll", "commit", "seek_to_begin", "seek_to_end",
                "fetch_message_queues", "offset_for_timestamp", "committed")

    def seek(self, queue, queue_offset: int) -> None:
        """Continue ``queue`` from ``queue_offset``."""
        async def run():
            self.target.seek(queue, queue_offset)
        self._call(run())

    def assign(self, queues) -> None:
        """Consume exactly ``queues``."""
        async def run():
            self.target.assign(queues)
        self._call(run())


class PopConsumer(_Blocking):
    """Blocking :class:`pybroker.client.pop_consumer.PopConsumer` (same arguments)."""
    _async_class = _pop_consumer.PopConsumer
    _methods = ("receive", "receive_from", "ack", "ack_all", "change_invisible_time")


class PopPushConsumer(_Blocking):
    """Blocking :class:`pybroker.client.pop_consumer.PopPushConsumer` (same arguments)."""
    _async_class = _pop_consumer.PopPushConsumer
    _methods = ()


class Admin(_Blocking):
    """Blocking :class:`pybroker.client.admin.Admin` (same arguments)."""
    _async_class = _admin.Admin
    _methods = ("cluster_info", "topic_route", "topic_list", "create_topic", "delete_topic",
                "topic_stats", "consumer_progress", "query_message_by_key", "view_message",
                "broker_runtime_info")


__all__ = ["Admin", "LitePullConsumer", "PopConsumer", "PopPushConsumer", "Producer",
           "PushConsumer", "TransactionProducer"]
