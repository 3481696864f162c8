# `pybroker admin` commands about consumers across a broker (mqadmin's names and letters).
"""consumerStatus (each client's own view: its properties, subscriptions, queues and rates,
as ConsumerRunningInfo.formatString prints it) and brokerConsumeStats (every group's lag on
one broker)."""
import os
import time

from pybroker.admin.broker_commands import Command, masters
from pybroker.admin.group_commands import queue_entries
from pybroker.client.instance import check_response, request
from pybroker.protocol import fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.stats.metric_names import version_name

__all__ = ["COMMANDS", "format_running_info"]

_PROCESS_QUEUE_FIELDS = (
    "commitOffset", "cachedMsgMinOffset", "cachedMsgMaxOffset", "cachedMsgCount",
    "cachedMsgSizeInMiB", "transactionMsgMinOffset", "transactionMsgMaxOffset",
    "transactionMsgCount", "locked", "tryUnlockTimes", "lastLockTimestamp", "droped",
    "lastPullTimestamp", "lastConsumeTimestamp")
_BOOLEAN_FIELDS = frozenset({"locked", "droped"})
_TIME_FIELDS = frozenset({"lastLockTimestamp", "lastPullTimestamp", "lastConsumeTimestamp"})
_RATE_FIELDS = ("pullRT", "pullTPS", "consumeRT", "consumeOKTPS", "consumeFailedTPS")


def _human_ms(ms: int) -> str:
    """Java's UtilAll.timeMillisToHumanString: yyyyMMddHHmmssSSS, local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"


def _java_text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _process_queue_text(info: dict) -> str:
    parts = [f"{name}=" + (_human_ms(int(info.get(name, 0))) if name in _TIME_FIELDS
                           else _java_text(info.get(name, False if name in _BOOLEAN_FIELDS else 0)))
             for name in _PROCESS_QUEUE_FIELDS]
    return "ProcessQueueInfo [" + ", ".join(parts) + "]"


def _queue_rows(document: dict) -> list[tuple[dict, dict]]:
    return sorted(queue_entries({"offsetTable": document.get("mqTable", {})}),
                  key=lambda entry: (entry[0]["topic"], entry[0]["brokerName"],
                                     entry[0]["queueId"]))


def format_running_info(document: dict) -> str:
    """A ConsumerRunningInfo document as Java's ConsumerRunningInfo.formatString."""
    lines = ["#Consumer Properties#"]
    lines += [f"{key:<40}: {value}" for key, value in
              sorted(document.get("properties", {}).items())]
    lines += ["", "", "#Consumer Subscription#"]
    for index, data in enumerate(document.get("subscriptionSet", []), 1):
        lines.append(f"{index:03d} Topic: {data.get('topic', ''):<40} ClassFilter: "
                     f"{_java_text(data.get('classFilterMode', False)):<8} SubExpression: "
                     f"{data.get('subString', '')}")
    rows = _queue_rows(document)
    lines += ["", "", "#Consumer Offset#",
              f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Consumer Offset':<20}"]
    lines += [f"{queue['topic']:<32}  {queue['brokerName']:<32}  {queue['queueId']:<4}  "
              f"{info.get('commitOffset', 0):<20}" for queue, info in rows]
    lines += ["", "", "#Consumer MQ Detail#",
              f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#ProcessQueueInfo':<20}"]
    lines += [f"{queue['topic']:<64}  {queue['brokerName']:<32}  {queue['queueId']:<4}  "
              f"{_process_queue_text(info)}" for queue, info in rows]
    lines += ["", "", "#Consumer RT&TPS#",
              f"{'#Topic':<64}  {'#Pull RT':>14} {'#Pull TPS':>14} {'#Consume RT':>14} "
              f"{'#ConsumeOK TPS':>14} {'#ConsumeFailed TPS':>18} "
              f"{'#ConsumeFailedMsgsInHour':>25}"]
    for topic, status in sorted(document.get("statusTable", {}).items()):
        rates = " ".join(f"{float(status.get(name, 0)):14.2f}" for name in _RATE_FIELDS[:4])
        lines.append(f"{topic:<32}  {rates} {float(status.get('consumeFailedTPS', 0)):18.2f} "
                     f"{int(status.get('consumeFailedMsgs', 0)):25d}")
    if document.get("jstack"):
        lines += ["", "", "#Consumer jstack#", str(document["jstack"])]
    return "\n".join(lines) + "\n"


async def _running_info(admin, args, client_id: str) -> dict | None:
    fields = {"consumerGroup": args.group, "clientId": client_id,
              "jstackEnable": str(bool(args.jstack)).lower()}
    for _, address in await masters(admin, args):
        response = await admin.instance.invoke(address, request(
            RequestCode.GET_CONSUMER_RUNNING_INFO, dict(fields)))
        if response.code == ResponseCode.SUCCESS:
            return fastjson.loads(response.body or b"{}")
    return None


async def _connections(admin, args) -> list[dict] | None:
    for _, address in await masters(admin, args):
        response = await admin.instance.invoke(address, request(
            RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": args.group}))
        if response.code == ResponseCode.SUCCESS:
            return fastjson.loads(response.body or b"{}").get("connectionSet", [])
    return None


def _version_name(version: int) -> str:
    """MQVersion.getVersionDesc: V4_9_8 (a number for versions before 4.0.0)."""
    return version_name(version).upper()


async def consumer_status(admin, args, out) -> int:
    if args.client_id:
        document = await _running_info(admin, args, args.client_id)
        if document is None:
            out.progress(f"pybroker admin consumerStatus: no client {args.client_id} of "
                         f"group {args.group} answered")
            return 1
        if out.json:
            out.document(document)
        else:
            out.stream.write(format_running_info(document))
        return 0
    connections = await _connections(admin, args)
    if connections is None:
        out.progress(f"the consumer group [{args.group}] is not online")
        return 1
    directory = str(time.time_ns() // 1_000_000)
    rows: list[list] = []
    documents: dict[str, dict] = {}
    for connection in sorted(connections, key=lambda c: c["clientId"]):
        document = await _running_info(admin, args, connection["clientId"])
        if document is None:
            continue
        documents[connection["clientId"]] = document
        path = os.path.join(directory, connection["clientId"])
        os.makedirs(directory, exist_ok=True)
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(format_running_info(document))
        rows.append([len(rows) + 1, connection["clientId"],
                     _version_name(connection.get("version", 0)), path])
    out.table(["Index", "ClientId", "Version", "ConsumerRunningInfoFile"], rows, documents)
    if documents and not out.json:
        out.line("\n" + _analysis(documents))
    return 0


def _analysis(documents: dict[str, dict]) -> str:
    """Java's analyzeSubscription: push clients running for over 2 minutes must subscribe
    alike; then the queues a push client has cached messages of but consumed none from for a
    minute (analyzeProcessQueue, not orderly)."""
    infos = list(documents.values())
    properties = infos[0].get("properties", {})
    push = properties.get("PROP_CONSUME_TYPE") == "CONSUME_PASSIVELY"
    started = int(properties.get("PROP_CONSUMER_START_TIMESTAMP", "0") or 0)
    now = time.time_ns() // 1_000_000
    if push and now - started > 120_000:
        first = _subscriptions(infos[0])
        if any(_subscriptions(info) != first for info in infos[1:]):
            return "\nWARN: Different subscription in the same group of consumer!!!"
    lines = ["\nSame subscription in the same group of consumer", "", "Rebalance OK"]
    for client_id, info in documents.items():
        if info.get("properties", {}).get("PROP_CONSUME_TYPE") != "CONSUME_PASSIVELY" or \
                info.get("properties", {}).get("PROP_CONSUMEORDERLY") == "true":
            continue
        for queue, pq in _queue_rows(info):
            idle = now - int(pq.get("lastConsumeTimestamp", 0))
            if idle > 60_000 and pq.get("cachedMsgCount", 0) > 0:
                lines.append(f"{client_id} MessageQueue [topic={queue['topic']}, brokerName="
                             f"{queue['brokerName']}, queueId={queue['queueId']}] can't "
                             f"consume for a while, maybe blocked, {idle}ms")
    return "\n".join(lines)


def _subscriptions(info: dict) -> list:
    return sorted((data.get("topic"), data.get("subString")) for data in
                  info.get("subscriptionSet", []))


async def broker_consume_stats(admin, args, out) -> int:
    response = check_response(await admin.instance.invoke(
        args.broker_addr, request(RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": args.order}),
        args.timeout_ms), args.broker_addr)
    document = fastjson.loads(response.body or b"{}")
    rows = []
    for groups in document.get("consumeStatsList", []):
        for group, stats_list in groups.items():
            for stats in stats_list:
                for queue, entry in queue_entries(stats):
                    diff = entry["brokerOffset"] - entry["consumerOffset"]
                    last = entry.get("lastTimestamp", 0)
                    if diff < args.level or last <= 0:
                        continue    # mqadmin prints queues with a consumed message only
                    rows.append([queue["topic"], group, queue["brokerName"], queue["queueId"],
                                 entry["brokerOffset"], entry["consumerOffset"], diff,
                                 time.strftime("%Y-%m-%d %H:%M:%S",
                                               time.localtime(last / 1000))])
    rows.sort(key=lambda row: (row[1], row[0], row[2], row[3]))
    columns = ["Topic", "Group", "Broker Name", "QID", "Broker Offset", "Consumer Offset",
               "Diff", "LastTime"]
    out.table(columns, rows, {"totalDiff": document.get("totalDiff", 0),
                              "brokerAddr": document.get("brokerAddr"),
                              "queues": [dict(zip(columns, row, strict=True))
                                         for row in rows]})
    out.line(f"\nDiff Total: {document.get('totalDiff', 0)}")
    return 0


COMMANDS: dict[str, Command] = {
    "consumerStatus": (consumer_status, "each client's view of its group (running info)", (
        ("-g", "group", {"required": True, "help": "consumer group"}),
        ("-i", "client_id", {"help": "only this client: its running info"}),
        ("-b", "broker_addr", {"help": "ask this broker"}),
        ("-s", "jstack", {"action": "store_true", "help": "ask Java clients for a jstack"}))),
    "brokerConsumeStats": (broker_consume_stats, "every group's lag on one broker", (
        ("-b", "broker_addr", {"required": True, "help": "broker ip:port"}),
        ("-t", "timeout_ms", {"type": int, "default": 50000, "help": "request timeout ms"}),
        ("-l", "level", {"type": int, "default": 0, "help": "print queues lagging at least"}),
        ("-o", "order", {"default": "false", "help": "order topics only (true|false)"}))),
}
