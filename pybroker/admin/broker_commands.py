# `pybroker admin` commands about clusters, brokers and topics (mqadmin's names and letters).
"""clusterList, brokerStatus, topicList, topicRoute, topicStatus, updateTopic, deleteTopic,
getBrokerConfig, updateBrokerConfig, statsAll. Each is ``async def run(admin, args, out)``."""
import time
from collections.abc import Callable
from typing import Any

from pybroker.broker import attributes
from pybroker.client.instance import check_response, request
from pybroker.protocol import bodies, fastjson, headers
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.constants import (DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX,
                                         Perm)

__all__ = ["COMMANDS"]

MASTER_ID = 0


async def masters(admin, args) -> list[tuple[str, str]]:
    """(broker name, master address) selected by -b (one address) or -c (a cluster; all
    clusters when neither is given)."""
    if getattr(args, "broker_addr", None):
        return [("", args.broker_addr)]
    info = await admin.cluster_info()
    cluster = getattr(args, "cluster", None)
    names = info.cluster_addr_table.get(cluster, []) if cluster else list(info.broker_addr_table)
    return [(name, info.broker_addr_table[name].broker_addrs[MASTER_ID]) for name in sorted(names)
            if MASTER_ID in info.broker_addr_table[name].broker_addrs]


async def invoke(admin, address: str, code: int, fields=None, body=None):
    response = await admin.instance.invoke(address, request(code, fields or {}, body))
    check_response(response, address)
    return response


def _first_rate(text: str) -> float:
    field = (text or "").split(" ")[0]
    return float(field) if field else 0.0


async def cluster_list(admin, args, out) -> int:
    info = await admin.cluster_info()
    rows = []
    for cluster, names in sorted(info.cluster_addr_table.items()):
        if args.cluster and cluster != args.cluster:
            continue
        for name in sorted(names):
            for broker_id, address in sorted(info.broker_addr_table[name].broker_addrs.items()):
                runtime = await admin.broker_runtime_info(address)
                earliest = int(runtime.get("earliestMessageTimeStamp", "0") or 0)
                hours = (time.time() * 1000 - earliest) / 3_600_000 if earliest > 0 else 0.0
                rows.append([cluster, name, broker_id, address,
                             runtime.get("brokerVersionDesc", ""),
                             _first_rate(runtime.get("putTps", "")),
                             _first_rate(runtime.get("getTransferedTps", "")),
                             int(runtime.get("pageCacheLockTimeMills", "0")), hours,
                             float(runtime.get("commitLogDiskRatio", "-1"))])
    out.table(["Cluster Name", "Broker Name", "BID", "Addr", "Version", "InTPS", "OutTPS",
               "PCWait(ms)", "Hour", "SPACE"], rows)
    return 0


_RATE_KEYS = ("putTps", "getFoundTps", "getMissTps", "getTransferedTps", "getTotalTps")
BROKER_STATUS_NOTES = {
    "rates": "* {keys}: per-second rates over the last 10 s, 60 s and 600 s; a field is "
             "empty until the broker has run that long (Java prints the same).",
    "today": "* msgPutTotalTodayNow/msgGetTotalTodayNow count since the last local midnight, "
             "or since the broker started today; ...TodayMorning and ...YesterdayMorning "
             "stay 0 until it has run through a midnight (as Java).",
    "latency": "* putMessageDistributeTime, putLatency99/999: sends of the last 60 s up to "
               "now (Java: of the last completed minute since it started, so null and 0.00 "
               "in its first minute).",
}


def broker_status_notes(table: dict[str, str]) -> list[str]:
    """The footer of brokerStatus: what its first-minutes figures mean (docs/statistics.md,
    "statsAll and brokerStatus"); a note only where it applies to ``table``."""
    notes = []
    empty = [key for key in _RATE_KEYS
             if key in table and "" in table[key].split(" ")]
    if empty:
        notes.append(BROKER_STATUS_NOTES["rates"].format(keys=", ".join(empty)))
    if table.get("msgPutTotalTodayMorning") == "0" and "msgPutTotalTodayNow" in table:
        notes.append(BROKER_STATUS_NOTES["today"])
    if "putMessageDistributeTime" in table:
        notes.append(BROKER_STATUS_NOTES["latency"])
    return notes


async def broker_status(admin, args, out) -> int:
    selected = await masters(admin, args)
    tables = {address: await admin.broker_runtime_info(address) for _, address in selected}
    if len(tables) == 1 and args.broker_addr:
        out.pairs(next(iter(tables.values())))
    elif out.json:
        out.document(tables)
    else:
        for address, table in tables.items():
            out.pairs({f"{address} {key}": value for key, value in table.items()})
    notes = list(dict.fromkeys(note for table in tables.values()
                               for note in broker_status_notes(table)))
    if notes:
        out.line("\n" + "\n".join(notes))
    return 0


async def topic_list(admin, args, out) -> int:
    topics = sorted(await admin.topic_list())
    if out.json:
        out.document(topics)
    else:
        for topic in topics:
            out.line(topic)
    return 0


async def topic_route(admin, args, out) -> int:
    route = await admin.topic_route(args.topic)
    if route is None:
        out.progress(f"topic {args.topic} has no route")
        return 1
    out.document(fastjson.loads(bodies.encode_topic_route(route, quoted_keys=True)))
    return 0


async def topic_status(admin, args, out) -> int:
    route = await admin.topic_route(args.topic)
    if route is None:
        out.progress(f"topic {args.topic} has no route")
        return 1
    rows = []
    fields = headers.encode_header(headers.TOPIC_REQUEST, {"topic": args.topic})
    for broker in sorted(route.broker_datas, key=lambda b: b.broker_name):
        address = broker.broker_addrs.get(MASTER_ID)
        if address is None:
            continue
        response = await invoke(admin, address, RequestCode.GET_TOPIC_STATS_INFO, dict(fields))
        table = fastjson.loads(response.body or b"{}").get("offsetTable", {})
        for key, stats in table.items():
            queue = fastjson.loads(key) if isinstance(key, str) else key
            updated = stats.get("lastUpdateTimestamp", 0)
            rows.append([queue["brokerName"], queue["queueId"], stats["minOffset"],
                         stats["maxOffset"],
                         time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(updated / 1000))
                         if updated else ""])
    rows.sort(key=lambda row: (row[0], row[1]))
    out.table(["Broker Name", "QID", "Min Offset", "Max Offset", "Last Updated"], rows)
    return 0


async def update_topic(admin, args, out) -> int:
    perm = int(args.perm) if args.perm is not None else int(Perm.READ | Perm.WRITE)
    modification = (args.attributes or "").strip()
    try:
        # Checked here as mqadmin 5.x does before sending (the broker checks it again).
        attributes.parse_modification(modification)
    except attributes.AttributeRefused as refused:
        out.progress(refused.remark)
        return 1
    fields = headers.encode_header(headers.CREATE_TOPIC_REQUEST, {
        "topic": args.topic, "default_topic": "TBW102", "read_queue_nums": args.read_queue_nums,
        "write_queue_nums": args.write_queue_nums, "perm": perm,
        "topic_filter_type": "SINGLE_TAG", "topic_sys_flag": 0, "order": args.order == "true",
        "attributes": modification or None})
    for _, address in await masters(admin, args):
        await invoke(admin, address, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(fields))
        out.line(f"create topic to {address} success.")
    shown = f", attributes={modification}" if modification else ""
    out.line(f"TopicConfig [topicName={args.topic}, readQueueNums={args.read_queue_nums}, "
             f"writeQueueNums={args.write_queue_nums}, perm={perm}{shown}]")
    return 0


async def delete_topic(admin, args, out) -> int:
    await admin.delete_topic(args.topic, cluster=args.cluster)
    out.line(f"delete topic [{args.topic}] from cluster [{args.cluster}] success.")
    return 0


async def get_broker_config(admin, args, out) -> int:
    configs = {}
    for _, address in await masters(admin, args):
        response = await invoke(admin, address, RequestCode.GET_BROKER_CONFIG)
        text = bytes(response.body or b"").decode("utf-8")
        configs[address] = dict(line.split("=", 1) for line in text.splitlines()
                                if "=" in line)
    if len(configs) == 1:
        out.pairs(next(iter(configs.values())))
    elif out.json:
        out.document(configs)
    else:
        for address, values in configs.items():
            out.line(f"============{address}============")
            out.pairs(values)
    return 0


async def update_broker_config(admin, args, out) -> int:
    body = f"{args.key}={args.value}\n".encode()
    for _, address in await masters(admin, args):
        await invoke(admin, address, RequestCode.UPDATE_BROKER_CONFIG, body=body)
        out.line(f"update broker config success, {address}")
    return 0


async def _stats_sum(admin, address: str, name: str, key: str):
    try:
        return await admin.broker_stats(address, name, key)
    except Exception:   # Java's statsAll skips items a broker does not have
        return None


def _day_sum(data, shorter: set[str]) -> int:
    """Java's compute24HourSum: the day window's sum, else the hour's, else the minute's;
    the window used, when shorter than a day, is added to ``shorter``."""
    for window in ("statsDay", "statsHour", "statsMinute"):
        if data and data[window]["sum"]:
            if window != "statsDay":
                shorter.add(window)
            return int(data[window]["sum"])
    return 0


# statsAll's footer: what Java's first-minutes figures mean (docs/statistics.md).
STATS_ALL_TPS_NOTE = (
    "* InTPS/OutTPS: messages per second over the last minute, from snapshots every 10 s "
    "(Java's StatsItem). A topic or group first seen less than a minute ago is averaged from "
    "a zero snapshot 10 s before it was first seen to the latest snapshot: 140 messages sent "
    "over 10 s read 140 / 20-30 s = 7.00-4.67 just after, and 0.00 a minute later (Java "
    "prints the same).")
STATS_ALL_DAY_NOTE = (
    "* InMsg24Hour/OutMsg24Hour: the last day's count from hourly snapshots; in the first "
    "hour of a topic or group the last hour's from 10-minute snapshots, and before the first "
    "of those only the last minute's: a count falls back to 0 between one and ten minutes "
    "after a burst, then comes back (Java's mqadmin computes the same). {rows} row(s) above "
    "count such a shorter window.")


async def stats_all(admin, args, out) -> int:
    rows, shorter_rows, young_rows = [], 0, 0
    for topic in sorted(await admin.topic_list()):
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)) or \
                (args.topic and topic != args.topic):
            continue
        route = await admin.topic_route(topic)
        addresses = [b.broker_addrs[MASTER_ID] for b in (route.broker_datas if route else [])
                     if MASTER_ID in b.broker_addrs]
        in_tps, in_day, in_shorter = 0.0, 0, set[str]()
        for address in addresses:
            data = await _stats_sum(admin, address, "TOPIC_PUT_NUMS", topic)
            in_tps += data["statsMinute"]["tps"] if data else 0.0
            in_day += _day_sum(data, in_shorter)
        groups = await _consumers_of(admin, addresses, topic)
        candidates: list[str | None] = list(groups or []) or [None]
        for group in candidates:
            out_tps, out_day, lag, shorter = 0.0, 0, 0, set(in_shorter)
            for address in addresses if group else []:
                data = await _stats_sum(admin, address, "GROUP_GET_NUMS", f"{topic}@{group}")
                out_tps += data["statsMinute"]["tps"] if data else 0.0
                out_day += _day_sum(data, shorter)
                lag += await _lag(admin, address, group or "", topic)
            if not args.active or in_day or out_day:
                rows.append([topic, group or "", lag, in_tps, out_tps if group else None,
                             in_day, out_day if group else "NO_CONSUMER"])
                shorter_rows += bool(shorter)
                # Counted from the minute window alone: first seen under ten minutes ago.
                young_rows += "statsMinute" in shorter and bool(in_tps or out_tps)
    out.table(["Topic", "Consumer Group", "Accumulation", "InTPS", "OutTPS", "InMsg24Hour",
               "OutMsg24Hour"], rows)
    notes = ([STATS_ALL_TPS_NOTE] if young_rows else []) + \
        ([STATS_ALL_DAY_NOTE.format(rows=shorter_rows)] if shorter_rows else [])
    if notes:
        out.line("\n" + "\n".join(notes))
    return 0


async def _consumers_of(admin, addresses, topic: str) -> list[str]:
    fields = headers.encode_header(headers.TOPIC_REQUEST, {"topic": topic})
    groups: set[str] = set()
    for address in addresses:
        try:
            response = await invoke(admin, address, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
                                    dict(fields))
        except Exception:
            continue
        groups.update(fastjson.loads(response.body or b"{}").get("groupList", []))
    return sorted(groups)


async def _lag(admin, address: str, group: str, topic: str) -> int:
    try:
        stats = await admin.consume_stats(address, group, topic)
    except Exception:
        return 0
    return max(sum(entry["brokerOffset"] - entry["consumerOffset"]
                   for entry in stats.get("offsetTable", {}).values()), 0)


# An option: (flag, destination, argparse keywords); a command: (coroutine, help, options).
Option = tuple[str, str, dict[str, Any]]
Command = tuple[Callable[..., Any], str, tuple[Option, ...]]
_BROKER_OR_CLUSTER: tuple[Option, ...] = (
    ("-b", "broker_addr", {"help": "broker address ip:port"}),
    ("-c", "cluster", {"help": "cluster name"}))
COMMANDS: dict[str, Command] = {
    "clusterList": (cluster_list, "brokers of the clusters with their rates",
                    (("-c", "cluster", {"help": "only this cluster"}),)),
    "brokerStatus": (broker_status, "a broker's runtime statistics", _BROKER_OR_CLUSTER),
    "topicList": (topic_list, "every topic the name servers know", ()),
    "topicRoute": (topic_route, "a topic's route", (("-t", "topic", {"required": True}),)),
    "topicStatus": (topic_status, "min/max offsets per queue of a topic",
                    (("-t", "topic", {"required": True}),)),
    "updateTopic": (update_topic, "create or update a topic", (
        ("-t", "topic", {"required": True}), *_BROKER_OR_CLUSTER,
        ("-r", "read_queue_nums", {"type": int, "default": 8}),
        ("-w", "write_queue_nums", {"type": int, "default": 8}),
        ("-p", "perm", {"help": "permission: 2 W, 4 R, 6 RW"}),
        ("-o", "order", {"default": "false"}),
        ("-a", "attributes", {"help": "5.x attributes: +key=value,-key (e.g. "
                                      "+message.type=FIFO)"}))),
    "deleteTopic": (delete_topic, "delete a topic from a cluster's brokers and name servers",
                    (("-t", "topic", {"required": True}),
                     ("-c", "cluster", {"required": True}))),
    "getBrokerConfig": (get_broker_config, "a broker's effective settings",
                        _BROKER_OR_CLUSTER),
    "updateBrokerConfig": (update_broker_config, "change a setting at run time", (
        *_BROKER_OR_CLUSTER, ("-k", "key", {"required": True}),
        ("-v", "value", {"required": True}))),
    "statsAll": (stats_all, "in/out TPS and 24 h counts of every topic and group", (
        ("-t", "topic", {}), ("-a", "active", {"action": "store_true"}))),
}
