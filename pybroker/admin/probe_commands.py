# `pybroker admin` commands that measure sends to brokers (mqadmin's names and letters).
"""sendMsgStatus (send times to one broker), clusterRT (average send time to every broker of
the clusters, every few seconds). Both send to the topic named after the broker, which every
broker creates at start (brokerTopicEnable), with mqadmin's bodies of ``a`` characters."""
import asyncio
import datetime
import time

from pybroker.admin.broker_commands import Command
from pybroker.client.message import Message
from pybroker.client.producer import Producer

__all__ = ["COMMANDS", "send_result_text"]

SEND_STATUS_GROUP = "PID_SMSC"          # mqadmin's producer group for sendMsgStatus
CLUSTER_RT_GROUP = "PYBROKER_CLUSTER_RT"
# clusterRT -p true prints Java's "tlog" time, which Java formats in GMT+8 whatever the host.
_TLOG_ZONE = datetime.timezone(datetime.timedelta(hours=8))


def send_result_text(result) -> str:
    """Java 4.9.8's SendResult.toString."""
    queue = result.message_queue
    return (f"SendResult [sendStatus={result.status.name}, msgId={result.msg_id}, "
            f"offsetMsgId={result.offset_msg_id}, messageQueue=MessageQueue "
            f"[topic={queue.topic}, brokerName={queue.broker_name}, queueId={queue.queue_id}], "
            f"queueOffset={result.queue_offset}]")


def _producer(admin, group: str) -> Producer:
    return Producer(group, instance=admin.instance, retry_times_when_send_failed=0)


async def send_msg_status(admin, args, out) -> int:
    producer = _producer(admin, SEND_STATUS_GROUP)
    await producer.start()
    rows = []
    try:
        await producer.send(Message(args.broker_name, "a" * 16))     # warm-up, as mqadmin
        for _ in range(args.count):
            begin = time.monotonic()
            result = await producer.send(Message(args.broker_name, "a" * args.message_size))
            rt_ms = int((time.monotonic() - begin) * 1000)
            out.line(f"rt={rt_ms}ms, SendResult={send_result_text(result)}")
            rows.append({"rtMs": rt_ms, "sendStatus": result.status.name,
                         "msgId": result.msg_id, "queueId": result.message_queue.queue_id,
                         "queueOffset": result.queue_offset})
    finally:
        await producer.shutdown()
    if out.json:
        out.document(rows)
    return 0


async def _broker_rt(producer: Producer, broker_name: str, amount: int,
                     size: int) -> tuple[float, int, int]:
    """(average ms of the sends after the first, successes, failures), as mqadmin."""
    message = Message(broker_name, "a" * size)
    elapsed_s, success, fail = 0.0, 0, 0
    for index in range(amount):
        begin = time.monotonic()
        try:
            await producer.send(message)
            success += 1
        except Exception:       # mqadmin counts any failure and goes on
            fail += 1
        if index:
            elapsed_s += time.monotonic() - begin
    return (elapsed_s * 1000 / (amount - 1) if amount > 1 else 0.0), success, fail


async def cluster_rt(admin, args, out) -> int:
    producer = _producer(admin, CLUSTER_RT_GROUP)
    await producer.start()
    tlog = args.print_log == "true"
    if not tlog:
        out.line(f"{'#Cluster Name':<24}  {'#Broker Name':<24}  {'#RT':<4}  "
                 f"{'#successCount':<8}  {'#failCount':<8}".rstrip())
    rounds = 0
    try:
        while True:
            info = await admin.cluster_info()
            clusters = [args.cluster] if args.cluster else sorted(info.cluster_addr_table)
            for cluster in clusters:
                names = info.cluster_addr_table.get(cluster)
                if names is None:
                    out.line(f"cluster [{cluster}] not exist")
                    break
                for name in sorted(names):
                    rt, success, fail = await _broker_rt(producer, name, args.amount, args.size)
                    _print_rt(out, tlog, args.machine_room, cluster, name, rt, success, fail)
            rounds += 1
            if args.rounds and rounds >= args.rounds:
                return 0
            await asyncio.sleep(args.interval)
    finally:
        await producer.shutdown()


def _print_rt(out, tlog: bool, room: str, cluster: str, name: str, rt: float, success: int,
              fail: int) -> None:
    if out.json:
        out.document({"cluster": cluster, "brokerName": name, "rtMs": round(rt, 2),
                      "successCount": success, "failCount": fail})
    elif tlog:
        now = datetime.datetime.now(_TLOG_ZONE).strftime("%Y-%m-%d %H:%M:%S")
        out.line(f"{now}|{room}|{cluster}|{name}|{round(rt)}")
    else:
        out.line(f"{cluster:<24}  {name:<24}  {rt:<8.2f}  {success:<16}  {fail:<16}".rstrip())


COMMANDS: dict[str, Command] = {
    "sendMsgStatus": (send_msg_status, "send times to one broker", (
        ("-b", "broker_name", {"required": True, "help": "broker name"}),
        ("-s", "message_size", {"type": int, "default": 128, "help": "bytes"}),
        ("-c", "count", {"type": int, "default": 50}))),
    "clusterRT": (cluster_rt, "average send time to every broker, every -i seconds", (
        ("-a", "amount", {"type": int, "default": 100, "help": "sends per broker and round"}),
        ("-s", "size", {"type": int, "default": 128, "help": "message bytes"}),
        ("-c", "cluster", {"help": "only this cluster"}),
        ("-i", "interval", {"type": float, "default": 10, "help": "seconds between rounds"}),
        ("-p", "print_log", {"default": "false", "help": "print as tlog (true|false)"}),
        ("-m", "machine_room", {"default": "noname"}),
        ("--rounds", "rounds", {"type": int, "default": 0,
                                "help": "stop after this many rounds (pybroker; 0: never, "
                                        "as mqadmin)"}))),
}
