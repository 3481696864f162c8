# Consumer offsets: on the broker (clustering) or in a local file (broadcasting).
"""Where a consumer group's consumer offsets live.

:class:`RemoteOffsetStore` (clustering) keeps the offsets in memory, reads missing ones with
QUERY_CONSUMER_OFFSET and writes them back with UPDATE_CONSUMER_OFFSET (oneway, as Java does).
:class:`LocalFileOffsetStore` (broadcasting) keeps them in a JSON file per client and group,
written atomically (temp file, fsync-free rename, previous copy kept as ``.bak``).
A consumer offset is the queue offset of the next message to consume.
"""
import logging
import os
import pathlib
from typing import Iterable, Optional

import orjson

from pybroker.client.errors import QueryNotFoundError
from pybroker.client.instance import ClientInstance, check_response, request
from pybroker.protocol import headers
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.codes import RequestCode

LOGGER = logging.getLogger("pybroker.client")
OFFSET_UNKNOWN = -1


class _OffsetTable:
    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}

    def update_offset(self, queue: MessageQueue, consumer_offset: int,
                      increase_only: bool = False) -> None:
        """Remember ``consumer_offset`` for ``queue`` (never lower it when ``increase_only``)."""
        current = self.offsets.get(queue)
        if increase_only and current is not None and current >= consumer_offset:
            return
        self.offsets[queue] = consumer_offset

    def cached_offset(self, queue: MessageQueue) -> int:
        """The offset in memory, or OFFSET_UNKNOWN (-1)."""
        return self.offsets.get(queue, OFFSET_UNKNOWN)

    def remove(self, queue: MessageQueue) -> None:
        """Forget ``queue`` (after it was persisted and handed to another client)."""
        self.offsets.pop(queue, None)


class RemoteOffsetStore(_OffsetTable):
    """Offsets of a clustering group, stored by the broker that owns each queue."""

    def __init__(self, instance: ClientInstance, group: str):
        super().__init__()
        self.instance = instance
        self.group = group

    async def read_offset(self, queue: MessageQueue, from_store: bool = False) -> int:
        """The consumer offset of ``queue``: from memory unless ``from_store``; -1 when the
        broker has none (QUERY_NOT_FOUND)."""
        if not from_store and queue in self.offsets:
            return self.offsets[queue]
        # Java: the master, else (master down) a slave of the set.
        address = await self.instance.find_broker_for_subscribe(queue.broker_name,
                                                                 topic=queue.topic)
        fields = headers.encode_header(headers.QUERY_CONSUMER_OFFSET_REQUEST, {
            "consumer_group": self.group, "topic": queue.topic, "queue_id": queue.queue_id})
        response = await self.instance.invoke(
            address, request(RequestCode.QUERY_CONSUMER_OFFSET, fields))
        try:
            check_response(response, address)
        except QueryNotFoundError:
            return OFFSET_UNKNOWN
        offset = headers.CONSUMER_OFFSET_RESPONSE.parse(response.ext_fields).consumer_offset
        # Never move an offset this client advanced (and has not persisted yet) backwards.
        self.update_offset(queue, offset, increase_only=True)
        return self.offsets[queue]

    async def persist(self, queue: MessageQueue, oneway: bool = True) -> None:
        """Send the offset of ``queue`` to its broker: oneway (as Java's periodic persist), or
        waiting for the broker's answer (typed error if it refuses)."""
        offset = self.offsets.get(queue)
        if offset is None:
            return
        address = await self.instance.find_broker_for_subscribe(queue.broker_name,
                                                                 topic=queue.topic)
        fields = headers.encode_header(headers.UPDATE_CONSUMER_OFFSET_REQUEST, {
            "consumer_group": self.group, "topic": queue.topic, "queue_id": queue.queue_id,
            "commit_offset": offset})
        if oneway:
            await self.instance.invoke_oneway(
                address, request(RequestCode.UPDATE_CONSUMER_OFFSET, fields, oneway=True))
            return
        response = await self.instance.invoke(
            address, request(RequestCode.UPDATE_CONSUMER_OFFSET, fields))
        check_response(response, address)

    async def persist_all(self, queues: Optional[Iterable[MessageQueue]] = None) -> None:
        """Persist ``queues`` (default: every queue in memory); failures are logged."""
        for queue in list(self.offsets if queues is None else queues):
            try:
                await self.persist(queue)
            except (ConnectionError, TimeoutError, OSError) as error:
                LOGGER.info("offset of %s not persisted: %s", queue, error)


class LocalFileOffsetStore(_OffsetTable):
    """Offsets of a broadcasting consumer in ``<directory>/<client_id>/<group>/offsets.json``."""

    def __init__(self, directory, client_id: str, group: str):
        super().__init__()
        safe_client_id = client_id.replace("/", "_").replace("@", "_")
        self.path = pathlib.Path(directory) / safe_client_id / group / "offsets.json"
        self._loaded = False

    def _load(self) -> None:
        self._loaded = True
        for path in (self.path, self.path.with_suffix(".json.bak")):
            try:
                entries = orjson.loads(path.read_bytes())["offsetTable"]
                for entry in entries:
                    queue = MessageQueue(str(entry["topic"]), str(entry["brokerName"]),
                                         int(entry["queueId"]))
                    self.offsets.setdefault(queue, int(entry["offset"]))
                return
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError) as error:
                LOGGER.warning("offset file %s unreadable (%s); trying its backup", path, error)

    async def read_offset(self, queue: MessageQueue, from_store: bool = False) -> int:
        """The offset of ``queue`` (the file is read once, on first use); -1 if unknown."""
        if not self._loaded or from_store:
            self._load()
        return self.offsets.get(queue, OFFSET_UNKNOWN)

    async def persist(self, queue: MessageQueue, oneway: bool = True) -> None:
        """Write the whole table (a single queue is not written alone; ``oneway`` is only
        there to match RemoteOffsetStore)."""
        await self.persist_all()

    async def persist_all(self, queues: Optional[Iterable[MessageQueue]] = None) -> None:
        """Write every offset in memory to the file, atomically."""
        if not self.offsets:
            return
        entries = [{"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id,
                    "offset": offset} for q, offset in sorted(
                        self.offsets.items(), key=lambda item: (item[0].topic,
                                                                item[0].broker_name,
                                                                item[0].queue_id))]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".json.tmp")
        temporary.write_bytes(orjson.dumps({"offsetTable": entries}))
        if self.path.exists():
            os.replace(self.path, self.path.with_suffix(".json.bak"))
        os.replace(temporary, self.path)
