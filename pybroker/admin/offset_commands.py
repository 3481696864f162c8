# `pybroker admin` commands that move a group's offsets as a whole (mqadmin's names/letters).
"""cloneGroupOffset (a group's offsets copied to another group), skipAccumulatedMessage
(a group's offsets moved to the end of its queues)."""
from pybroker.admin.broker_commands import MASTER_ID, Command, invoke
from pybroker.admin.group_commands import queue_entries
from pybroker.client.instance import check_response, request
from pybroker.protocol import fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode

__all__ = ["COMMANDS"]

SKIP_TIMESTAMP = -1     # resetOffsetByTimestamp's "the end of every queue"


def _route_masters(route) -> dict[str, str]:
    """broker name -> master address of a route."""
    return {broker.broker_name: broker.broker_addrs[MASTER_ID]
            for broker in (route.broker_datas if route else [])
            if MASTER_ID in broker.broker_addrs}


async def clone_group_offset(admin, args, out) -> int:
    """Java's CloneGroupOffsetCommand: the source group's consumer offsets on the topic's
    brokers committed for the destination group (queues without an offset left alone).
    Java copies every topic the source group has offsets for on those brokers (its retry
    topic too); pybroker copies the -t topic's, which is what the command names."""
    route = await admin.topic_route(args.topic)
    if route is None:
        out.progress(f"pybroker admin cloneGroupOffset: topic {args.topic} has no route")
        return 1
    rows = []
    for broker_name, address in sorted(_route_masters(route).items()):
        document = await admin.consume_stats(address, args.src_group, args.topic)
        for queue, entry in queue_entries(document):
            offset = entry["consumerOffset"]
            if queue["topic"] != args.topic or offset < 0:
                continue
            await invoke(admin, address, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": args.dest_group, "topic": args.topic,
                "queueId": str(queue["queueId"]), "commitOffset": str(offset)})
            rows.append({"brokerName": broker_name, "queueId": queue["queueId"],
                         "offset": offset})
    if out.json:
        out.document(sorted(rows, key=lambda row: (row["brokerName"], row["queueId"])))
    out.line(f"clone group offset success. srcGroup[{args.src_group}], "
             f"destGroup=[{args.dest_group}], topic[{args.topic}]")
    return 0


async def skip_accumulated_message(admin, args, out) -> int:
    """Java's SkipAccumulationSubCommand: resetOffsetByTimestamp to -1 (every queue's end)
    through the brokers, which tell the group's live clients; for a group with no client
    online, the offsets are committed directly (Java's resetOffsetByTimestampOld)."""
    route = await admin.topic_route(args.topic)
    if route is None:
        out.progress(f"pybroker admin skipAccumulatedMessage: topic {args.topic} has no route")
        return 1
    fields = {"topic": args.topic, "group": args.group, "timestamp": str(SKIP_TIMESTAMP),
              "isForce": args.force}
    rows, offline = [], []
    for _, address in sorted(_route_masters(route).items()):
        response = await admin.instance.invoke(address, request(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, dict(fields)))
        if response.code == ResponseCode.CONSUMER_NOT_ONLINE:
            offline += await _skip_offline(admin, address, args)
            continue
        check_response(response, address)
        for queue, offset in queue_entries(fastjson.loads(response.body or b"{}")):
            rows.append([queue["brokerName"], queue["queueId"], offset])
    if offline and not rows:
        out.table(["brokerName", "queueId", "brokerOffset", "consumerOffset",
                   "timestampOffset", "rollbackOffset"], sorted(offline))
    else:
        out.table(["brokerName", "queueId", "offset"], sorted(rows))
    return 0


async def _skip_offline(admin, address: str, args) -> list[list]:
    """Per queue of the group on the topic: (broker name, queue id, broker offset, consumer
    offset, the end of the queue, the offset now committed) - the end, unless it would move
    the offset forward without -f true (Java's RollbackStats)."""
    document = await admin.consume_stats(address, args.group, args.topic)
    rows = []
    for queue, entry in queue_entries(document):
        if queue["topic"] != args.topic:
            continue
        end, consumer = entry["brokerOffset"], entry["consumerOffset"]
        committed = consumer
        if args.force == "true" or end <= consumer:
            committed = end
            await invoke(admin, address, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": args.group, "topic": args.topic,
                "queueId": str(queue["queueId"]), "commitOffset": str(end)})
        rows.append([queue["brokerName"], queue["queueId"], end, consumer, end, committed])
    return rows


COMMANDS: dict[str, Command] = {
    "cloneGroupOffset": (clone_group_offset, "copy a group's offsets on a topic to another "
                         "group", (
                             ("-s", "src_group", {"required": True, "help": "source group"}),
                             ("-d", "dest_group", {"required": True,
                                                   "help": "destination group"}),
                             ("-t", "topic", {"required": True}),
                             ("-o", "offline", {"help": "accepted, unused (as mqadmin)"}))),
    "skipAccumulatedMessage": (skip_accumulated_message, "move a group's offsets on a topic "
                               "to the end of its queues", (
                                   ("-g", "group", {"required": True}),
                                   ("-t", "topic", {"required": True}),
                                   ("-f", "force", {"default": "true",
                                                    "help": "also move offsets forward "
                                                            "(true|false)"}),
                                   ("-c", "cluster", {"help": "cluster name (accepted)"}))),
}
