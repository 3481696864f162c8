# Drives the RocketMQ C++ client core (PyPI `rocketmq` 0.4.4, ctypes over librocketmq.so).
"""The C++ client core as a command line, one JSON object per line on stdout.

Usage (run with an interpreter that has the `rocketmq` 0.4.4 wheel installed):
  rmqcpp.py send NAMESRV TOPIC COUNT GROUP      sync sends (tag, keys, a user property), then
                                                oneway sends, then one batch of 3 (C++ sends
                                                it as SEND_MESSAGE_V2 with batch "1"/"true")
  rmqcpp.py consume NAMESRV TOPIC COUNT GROUP [TIMEOUT_S]
                                                push consumer until COUNT messages arrived
                                                and 3 s passed without more (or the timeout)
Lines: {"op": "sent", "kind": ..., "body": ..., "status": ..., "msgId": ..., "offset": ...},
{"op": "received", "body": ..., "tags": ..., "keys": ..., "prop": ..., "topic": ...},
{"op": "done", "count": n}. Exit 0 on success, 1 on failure.
"""
import json
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer


def emit(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _message(topic: str, kind: str, index: int) -> tuple[Message, str]:
    body = f"cpp-{kind}-{index}"
    message = Message(topic)
    message.set_keys(f"key-{body}")
    message.set_tags(f"Tag{kind}")
    message.set_property("prop", f"value-{index}")
    message.set_body(body)
    return message, body


def send(namesrv: str, topic: str, count: int, group: str) -> bool:
    producer = Producer(group)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    ok = True
    try:
        for index in range(count):
            message, body = _message(topic, "sync", index)
            result = producer.send_sync(message)
            emit(op="sent", kind="sync", body=body, status=result.status.name,
                 msgId=result.msg_id, offset=result.offset)
            ok &= result.status.name == "OK"
        for index in range(count):
            message, body = _message(topic, "oneway", index)
            producer.send_oneway(message)
            emit(op="sent", kind="oneway", body=body)
        batch = [_message(topic, "batch", index) for index in range(3)]
        result = producer.send_batch([message for message, _ in batch])
        emit(op="sent", kind="batch", body=",".join(body for _, body in batch),
             status=result.status.name, msgId=result.msg_id, offset=result.offset)
        ok &= result.status.name == "OK"
    finally:
        producer.shutdown()
    return ok


def consume(namesrv: str, topic: str, count: int, group: str, timeout_s: float) -> bool:
    lock = threading.Lock()
    seen = {"count": 0, "last": time.monotonic()}

    def on_message(message) -> None:
        with lock:
            seen["count"] += 1
            seen["last"] = time.monotonic()
        emit(op="received", topic=message.topic, body=message.body.decode(),
             tags=message.tags.decode(), keys=message.keys.decode(),
             prop=message.get_property("prop").decode(), queueId=message.queue_id,
             queueOffset=message.queue_offset, reconsume=message.reconsume_times)

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message)
    consumer.start()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            with lock:
                done = seen["count"] >= count and time.monotonic() - seen["last"] > 3
            if done:
                break
            time.sleep(0.1)
    finally:
        consumer.shutdown()
    emit(op="done", count=seen["count"])
    return seen["count"] == count


def main(argv: list[str]) -> int:
    mode, namesrv, topic, count, group = argv[1], argv[2], argv[3], int(argv[4]), argv[5]
    if mode == "send":
        return 0 if send(namesrv, topic, count, group) else 1
    timeout_s = float(argv[6]) if len(argv) > 6 else 60.0
    return 0 if consume(namesrv, topic, count, group, timeout_s) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
