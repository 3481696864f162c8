# A push consumer run as a separate process by test_resilience_pybroker.py (so it can be kill -9ed).
"""Consume ``topic`` in ``group`` and report on stdout, one JSON object a line.

    python tests/client/resilience_consumer.py NAMESRV GROUP TOPIC INSTANCE DELAY_MS

Lines: ``{"event": "started"}``, ``{"event": "queues", "queue_ids": [...]}`` whenever the
assignment changes, ``{"event": "consumed", "msg_id", "queue_id", "queue_offset"}`` after each
message was handled (the listener sleeps DELAY_MS per message so a test can kill it mid-stream).
Runs until killed or SIGTERM. Offsets are persisted every second, rebalance every second.
"""
import asyncio
import json
import signal
import sys

from pybroker.client.consumer import PushConsumer
from pybroker.client.listener import ConsumeStatus
from pybroker.protocol.constants import ConsumeFromWhere


def _emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


async def main(namesrv_addr: str, group: str, topic: str, instance_name: str,
               delay_ms: int) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def listener(messages, context):
        for message in messages:
            await asyncio.sleep(delay_ms / 1000)
            _emit({"event": "consumed", "msg_id": message.msg_id,
                   "queue_id": message.queue_id, "queue_offset": message.queue_offset})
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv_addr,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            instance_name=instance_name, rebalance_interval_ms=1000,
                            persist_consumer_offset_interval_ms=1000)
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    await consumer.start()
    _emit({"event": "started"})
    reported = None
    try:
        while not stop.is_set():
            queue_ids = sorted(q.queue_id for q in consumer.assigned_queues() if q.topic == topic)
            if queue_ids != reported:
                reported = queue_ids
                _emit({"event": "queues", "queue_ids": queue_ids})
            try:
                await asyncio.wait_for(stop.wait(), 0.1)
            except asyncio.TimeoutError:
                pass
    finally:
        await consumer.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
