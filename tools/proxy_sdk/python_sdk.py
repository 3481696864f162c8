# Scenarios of the official RocketMQ 5 Python SDK (rocketmq-python-client) through a gRPC proxy.
"""Runs rocketmq-python-client's Producer (and consumers) through rocketmq-proxy and prints one
``RESULT op=... key=value`` line per outcome (values URL-quoted; tests/peers.py
``parse_result_line`` reads them). Run it with the python of the SDK's own environment
(tools/python_sdk_venv.py): the SDK's package is named ``rocketmq``, as is the C++ client's on
PyPI, so it is never installed beside pybroker; this program needs nothing else.

Usage::

    ~/.cache/pybroker/python-sdk-venv-5.1.2/bin/python tools/proxy_sdk/python_sdk.py \
        --endpoint 127.0.0.1:8091 OP KEY=VALUE...

Ops (several may follow each other in one run, separated by ``then``; one SDK start-up each):

- ``produce normal=T fifo=T delay=T tx=T delay_ms=3000 tx_wait_s=60 run=R``: every producer
  scenario of issue #25 in one process: 3 normal messages (tag, keys, a user property); 4 FIFO
  messages in two message groups; one message delivered at now + delay_s (3); three transactional
  messages (committed by the client, rolled back, left to the server's check-back, which the
  checker commits); a normal message sent to the FIFO topic (the SDK's type check, then the
  proxy's); waits until the checker was asked (tx_wait_s at most).
- ``recall delay=T delay_s=3 run=R``: two delay messages due the same second, the second
  recalled by its handle.
- ``simple topic=T group=G dlq_topic=T2 dlq_group=G2 run=R``: SimpleConsumer receive, ack,
  change invisible duration and redelivery, then retries to the DLQ (see op_simple).
- ``push topic=T group=G dlq_topic=T2 dlq_group=G2 run=R``: PushConsumer with a listener that
  fails once, then one that always fails (to the DLQ; see op_push).
- ``pushslow topic=T group=G hold_s=S run=R``: PushConsumer whose listener holds one message
  S seconds, longer than the server's invisible time for it (see op_pushslow).
- ``bench-send topic=T seconds=S threads=N size=B`` and ``bench-receive topic=T group=G
  seconds=S``: the loads of tools/bench_proxy.py.
"""
import argparse
import sys
import threading
import time
import urllib.parse


def result(op: str, **fields) -> None:
    """One RESULT line, flushed (the test reads them as they come)."""
    parts = [f"op={op}"] + [f"{key}={urllib.parse.quote_plus(str(value))}"
                            for key, value in fields.items()]
    sys.stdout.write("RESULT " + " ".join(parts) + "\n")
    sys.stdout.flush()


def _message(rocketmq, topic: str, body: str, **attributes):
    message = rocketmq.Message()
    message.topic = topic
    message.body = body.encode()
    for key, value in attributes.items():
        if key == "properties":
            for name, text in value.items():
                message.add_property(name, text)
        elif key == "keys":
            message.keys = value
        else:
            setattr(message, key, value)
    return message


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _send(producer, op: str, message, **fields) -> object:
    try:
        receipt = producer.send(message)
    except Exception as error:  # noqa: BLE001 (the SDK's refusal is the result)
        result(op, status="error", error=_error_text(error), **fields)
        return None
    result(op, status="ok", msg_id=receipt.message_id, **fields)
    return receipt


def _transactions(rocketmq, producer, topic: str, run: str, asked: threading.Event) -> None:
    """Three half messages: the client commits one, rolls one back and leaves the third to
    the server's check-back (the checker commits it)."""
    for decision in ("commit", "rollback", "check"):
        transaction = producer.begin_transaction()
        message = _message(rocketmq, topic, f"{run}-tx-{decision}", tag="TagTx",
                           keys=f"{run}-tx-{decision}", properties={"decision": decision})
        receipt = producer.send(message, transaction)
        result("tx-send", status="ok", decision=decision, msg_id=receipt.message_id)
        if decision == "commit":
            transaction.commit()
        elif decision == "rollback":
            transaction.rollback()
        result("tx-end", decision=decision)


def _checker_class(rocketmq, asked: threading.Event):
    class Checker(rocketmq.TransactionChecker):
        def check(self, message):
            decision = message.properties.get("decision", "")
            result("tx-check", decision=decision, msg_id=message.message_id)
            if decision == "check":
                asked.set()
            # A check-back of a transaction the client already ended gets the same answer.
            if decision == "rollback":
                return rocketmq.TransactionResolution.ROLLBACK
            return rocketmq.TransactionResolution.COMMIT
    return Checker


def op_produce(rocketmq, config, args: dict) -> None:
    run = args["run"]
    topics = [args[kind] for kind in ("normal", "fifo", "delay", "tx")]
    asked = threading.Event()
    producer = rocketmq.Producer(config, tuple(topics),
                                 checker=_checker_class(rocketmq, asked)())
    producer.startup()
    try:
        for index in range(3):
            _send(producer, "normal", _message(
                rocketmq, args["normal"], f"{run}-normal-{index}", tag="TagA",
                keys=f"{run}-key-{index}", properties={"color": "blue", "index": str(index)}),
                index=index)
        for index in range(4):
            group = f"group-{index % 2}"
            _send(producer, "fifo", _message(rocketmq, args["fifo"], f"{run}-fifo-{index}",
                                             tag="TagF", message_group=group),
                  index=index, group=group)
        deliver_s = int(time.time()) + int(args.get("delay_s", 3))
        _send(producer, "delay", _message(rocketmq, args["delay"], f"{run}-delay",
                                          tag="TagD", delivery_timestamp=deliver_s),
              deliver_s=deliver_s)
        _transactions(rocketmq, producer, args["tx"], run, asked)
        _send(producer, "mismatch", _message(rocketmq, args["fifo"], f"{run}-mismatch"))
        # The same send past the SDK's own check (a private switch): the proxy's type check,
        # from the topic's message.type it read with GET_TOPIC_CONFIG, answers instead.
        producer._Producer__validate_message_type = False
        _send(producer, "mismatch-proxy", _message(rocketmq, args["fifo"],
                                                   f"{run}-mismatch-proxy"))
        producer._Producer__validate_message_type = True
        waited = asked.wait(float(args.get("tx_wait_s", 60)))
        result("tx-checked", asked=str(waited).lower())
    finally:
        producer.shutdown()


def op_recall(rocketmq, config, args: dict) -> None:
    """Two delay messages due the same second; the second is recalled by its handle (the
    first shows when the second would have arrived)."""
    producer = rocketmq.Producer(config, (args["delay"],))
    producer.startup()
    try:
        deliver_s = int(time.time()) + int(args.get("delay_s", 3))
        _send(producer, "recall-kept", _message(rocketmq, args["delay"], f"{args['run']}-kept",
                                                tag="TagR", delivery_timestamp=deliver_s),
              deliver_s=deliver_s)
        receipt = _send(producer, "recall-send", _message(
            rocketmq, args["delay"], f"{args['run']}-recalled", tag="TagR",
            delivery_timestamp=deliver_s), deliver_s=deliver_s)
        if receipt is None:
            return
        if not receipt.recall_handle:
            result("recall", status="error", error="the send receipt has no recall handle")
            return
        try:
            recalled = producer.recall_message(args["delay"], receipt.recall_handle)
            result("recall", status="ok", msg_id=recalled)
        except Exception as error:  # noqa: BLE001
            result("recall", status="error", error=_error_text(error))
    finally:
        producer.shutdown()


def _produce_plain(rocketmq, config, topic: str, bodies: list[str]) -> None:
    producer = rocketmq.Producer(config, (topic,))
    producer.startup()
    try:
        for body in bodies:
            producer.send(_message(rocketmq, topic, body, tag="TagC"))
    finally:
        producer.shutdown()


def _received(message) -> dict:
    return {"body": message.body.decode(), "attempt": message.delivery_attempt,
            "msg_id": message.message_id}


def _receive_until(consumer, wanted, deadline: float, handle) -> None:
    """Receive (invisible 10 s, the proxy's minimum) and hand each message to ``handle`` until
    ``wanted()`` is true or the deadline passes. A receive refused right after start-up is
    tried again: the proxy answers 50001 ("settings" is null) until the client's telemetry
    stream has sent it the consumer's settings, which the SDK's startup does not wait for."""
    while not wanted() and time.monotonic() < deadline:
        try:
            messages = consumer.receive(16, 10) or []
        except Exception as error:  # noqa: BLE001
            if "settings" not in str(error):
                raise
            time.sleep(0.2)
            continue
        for message in messages:
            handle(message)


def op_simple(rocketmq, config, args: dict) -> None:
    """SimpleConsumer: three messages received; the first and third acked, the second's
    invisible duration changed to 1 s and acked when it comes back (delivery attempt 2). Then
    on a group that retries once (``dlq_group``, retryMaxTimes 1), a message never acked (its
    invisible duration changed to 1 s each time) until the proxy stops delivering it: it is
    forwarded to the group's DLQ."""
    run, topic = args["run"], args["topic"]
    deadline = time.monotonic() + float(args.get("wait_s", 60))
    _produce_plain(rocketmq, config, topic, [f"{run}-simple-{i}" for i in range(3)])
    _produce_plain(rocketmq, config, args["dlq_topic"], [f"{run}-dlq"])
    consumer = rocketmq.SimpleConsumer(config, args["group"],
                                       {topic: rocketmq.FilterExpression()}, await_duration=3)
    consumer.startup()
    seen: dict[str, list[int]] = {}
    try:
        def handle(message):
            got = _received(message)
            seen.setdefault(got["body"], []).append(got["attempt"])
            result("simple-received", **got)
            if got["body"].endswith("-1") and len(seen[got["body"]]) == 1:
                consumer.change_invisible_duration(message, 1)
                result("simple-invisible", body=got["body"], seconds=1)
            else:
                consumer.ack(message)
                result("simple-ack", body=got["body"])
        mine = [f"{run}-simple-{i}" for i in range(3)]
        _receive_until(consumer, lambda: all(body in seen for body in mine)
                       and len(seen[mine[1]]) == 2, deadline, handle)
    finally:
        consumer.shutdown()
    dlq = rocketmq.SimpleConsumer(config, args["dlq_group"],
                                  {args["dlq_topic"]: rocketmq.FilterExpression()},
                                  await_duration=3)
    dlq.startup()
    attempts: list[int] = []
    try:
        def refuse(message):
            attempts.append(message.delivery_attempt)
            result("dlq-received", **_received(message))
            dlq.change_invisible_duration(message, 1)
        # Two deliveries (retryMaxTimes 1), then the proxy forwards it to %DLQ%<group>.
        _receive_until(dlq, lambda: len(attempts) >= 2, deadline, refuse)
        quiet_until = time.monotonic() + float(args.get("quiet_s", 8))
        _receive_until(dlq, lambda: time.monotonic() > quiet_until, deadline, refuse)
    finally:
        dlq.shutdown()


def op_push(rocketmq, config, args: dict) -> None:
    """PushConsumer: three messages consumed, the second failing once (redelivered, attempt
    2); on a group that retries once (``dlq_group``), a message that always fails goes to the
    group's DLQ after two deliveries."""
    run, topic = args["run"], args["topic"]
    deadline = time.monotonic() + float(args.get("wait_s", 60))
    _produce_plain(rocketmq, config, topic, [f"{run}-push-{i}" for i in range(3)])
    _produce_plain(rocketmq, config, args["dlq_topic"], [f"{run}-push-dlq"])
    seen: dict[str, list[int]] = {}
    lock = threading.Lock()

    class Listener(rocketmq.MessageListener):
        def __init__(self, fail_always: bool):
            self.fail_always = fail_always

        def consume(self, message):
            got = _received(message)
            with lock:
                seen.setdefault(got["body"], []).append(got["attempt"])
                first = len(seen[got["body"]]) == 1
            fail = self.fail_always or (got["body"].endswith("-1") and first)
            result("push-received", outcome="failure" if fail else "success", **got)
            return rocketmq.ConsumeResult.FAILURE if fail else rocketmq.ConsumeResult.SUCCESS

    consumers = [rocketmq.PushConsumer(config, args["group"], Listener(False),
                                       {topic: rocketmq.FilterExpression()}),
                 rocketmq.PushConsumer(config, args["dlq_group"], Listener(True),
                                       {args["dlq_topic"]: rocketmq.FilterExpression()})]
    for consumer in consumers:
        consumer.startup()
    mine = [f"{run}-push-{i}" for i in range(3)]

    def done() -> bool:
        with lock:
            return all(body in seen for body in mine) and len(seen[mine[1]]) >= 2 and \
                len(seen.get(f"{run}-push-dlq", [])) >= 2
    try:
        while not done() and time.monotonic() < deadline:
            time.sleep(0.2)
        # The third delivery (after the group's back-off) goes to the DLQ.
        time.sleep(float(args.get("quiet_s", 8)))
    finally:
        for consumer in consumers:
            consumer.shutdown()


def op_pushslow(rocketmq, config, args: dict) -> None:
    """PushConsumer: two messages, the listener holding the first ``hold_s`` seconds before it
    succeeds, the second at once. A push consumer's receive asks the server to renew what it
    delivered (auto_renew) while the client works on it: with the server's invisible time
    below ``hold_s``, a message not renewed comes back (delivery attempt 2) before the first
    delivery ends. Every delivery is reported; ``quiet_s`` more seconds after both succeeded
    show whether a message comes back (shutdown waits for a delivery still held)."""
    run, topic = args["run"], args["topic"]
    hold_s = float(args.get("hold_s", 16))
    deadline = time.monotonic() + float(args.get("wait_s", 90))
    bodies = [f"{run}-pushslow-{i}" for i in range(2)]
    _produce_plain(rocketmq, config, topic, bodies)
    succeeded: set[str] = set()
    lock = threading.Lock()

    class Listener(rocketmq.MessageListener):
        def consume(self, message):
            got = _received(message)
            started = time.monotonic()
            if got["body"] == bodies[0]:
                time.sleep(hold_s)
            result("pushslow-received", held_s=round(time.monotonic() - started, 1),
                   ended_s=round(time.monotonic() - begun, 1), **got)
            with lock:
                succeeded.add(got["body"])
            return rocketmq.ConsumeResult.SUCCESS

    consumer = rocketmq.PushConsumer(config, args["group"], Listener(),
                                     {topic: rocketmq.FilterExpression()})
    begun = time.monotonic()
    consumer.startup()
    try:
        while time.monotonic() < deadline:
            with lock:
                if succeeded >= set(bodies):
                    break
            time.sleep(0.2)
        time.sleep(float(args.get("quiet_s", 12)))
    finally:
        consumer.shutdown()


def op_bench_send(rocketmq, config, args: dict) -> None:
    """Load for tools/bench_proxy.py: ``threads`` threads send ``size``-byte messages to
    ``topic`` for ``seconds``; one result with the count sent, the errors and the seconds."""
    topic, seconds = args["topic"], float(args.get("seconds", 20))
    body = b"x" * int(args.get("size", 128))
    producer = rocketmq.Producer(config, (topic,))
    producer.startup()
    counts = {"sent": 0, "errors": 0}
    lock = threading.Lock()
    started = time.monotonic()
    stop_at = started + seconds

    def loop():
        while time.monotonic() < stop_at:
            message = rocketmq.Message()
            message.topic, message.body = topic, body
            try:
                producer.send(message)
                key = "sent"
            except Exception:  # noqa: BLE001 (counted; the tool reports them)
                key = "errors"
            with lock:
                counts[key] += 1
    threads = [threading.Thread(target=loop) for _ in range(int(args.get("threads", 8)))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        producer.shutdown()
    result("bench-send", seconds=round(time.monotonic() - started, 3), **counts)


def op_bench_receive(rocketmq, config, args: dict) -> None:
    """Load for tools/bench_proxy.py: a SimpleConsumer of ``group`` receives (32 at a time)
    and acks ``topic``'s messages for ``seconds``; one result with the count acked. (The
    proxy long-polls at least 5 s and refuses, 40018, a receive whose deadline, the SDK's
    request timeout of 3 s plus the await duration, leaves less: await 5 s.)"""
    topic, seconds = args["topic"], float(args.get("seconds", 20))
    consumer = rocketmq.SimpleConsumer(config, args["group"],
                                       {topic: rocketmq.FilterExpression()}, await_duration=5)
    consumer.startup()
    counts = {"acked": 0, "errors": 0}
    started = time.monotonic()
    try:
        _receive_until(consumer, lambda: time.monotonic() - started > seconds,
                       started + seconds + 30, lambda message: _ack_counted(consumer, message,
                                                                           counts))
    finally:
        consumer.shutdown()
    result("bench-receive", seconds=round(time.monotonic() - started, 3), **counts)


def _ack_counted(consumer, message, counts: dict) -> None:
    try:
        consumer.ack(message)
        counts["acked"] += 1
    except Exception:  # noqa: BLE001
        counts["errors"] += 1


OPS = {"produce": op_produce, "recall": op_recall, "simple": op_simple, "push": op_push,
       "pushslow": op_pushslow, "bench-send": op_bench_send,
       "bench-receive": op_bench_receive}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True, help="the proxy's gRPC host:port")
    parser.add_argument("ops", nargs="+", help="OP KEY=VALUE... [then OP KEY=VALUE...]")
    options = parser.parse_args(argv)
    import rocketmq  # noqa: PLC0415 (the SDK's environment; a clear error without it)
    config = rocketmq.ClientConfiguration(options.endpoint, rocketmq.Credentials())
    words, runs = list(options.ops), []
    while words:
        split = words.index("then") if "then" in words else len(words)
        runs.append(words[:split])
        words = words[split + 1:]
    for op, *pairs in runs:
        OPS[op](rocketmq, config, dict(pair.split("=", 1) for pair in pairs))
        result("done", of=op)
    return 0


if __name__ == "__main__":
    sys.exit(main())
