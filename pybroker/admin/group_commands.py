# `pybroker admin` commands about groups, connections, offsets and messages (mqadmin's names).
"""updateSubGroup, deleteSubGroup, setConsumeMode, getConsumeMode, consumerProgress,
consumerConnection, producerConnection, resetOffsetByTime, queryMsgById, queryMsgByKey,
queryMsgByUniqueKey, printMsg, sendMessage, consumeMessage."""
import datetime
import time

import orjson

from pybroker.admin.broker_commands import MASTER_ID, Command, Option, invoke, masters
from pybroker.client.instance import check_response, request
from pybroker.client.message import Message
from pybroker.client.producer import Producer
from pybroker.client.pulling import pull_message, queue_offset_query
from pybroker.client.route import subscribe_queues
from pybroker.protocol import bodies, fastjson
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.codes import RequestCode, ResponseCode

__all__ = ["COMMANDS", "queue_entries", "message_fields"]

ADMIN_PRODUCER_GROUP = "PYBROKER_ADMIN_PRODUCER"
ADMIN_CONSUMER_GROUP = "TOOLS_CONSUMER"     # MixAll.TOOLS_CONSUMER_GROUP, as mqadmin
PULL_BATCH_MAX = 32


async def update_sub_group(admin, args, out) -> int:
    document = {"groupName": args.group, "consumeEnable": args.consume_enable != "false",
                "consumeFromMinEnable": args.consume_from_min != "false",
                "consumeBroadcastEnable": args.broadcast != "false",
                "retryQueueNums": args.retry_queue_nums, "retryMaxTimes": args.retry_max_times,
                "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True,
                "consumeMessageOrderly": args.consume_message_orderly == "true"}
    body = orjson.dumps(document)
    for _, address in await masters(admin, args):
        await invoke(admin, address, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        out.line(f"create subscription group to {address} success.")
    if out.json:
        out.document(document)
    return 0


async def delete_sub_group(admin, args, out) -> int:
    for _, address in await masters(admin, args):
        await invoke(admin, address, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                     {"groupName": args.group, "removeOffset": "true", "cleanOffset": "true"})
        out.line(f"delete subscription group [{args.group}] from broker [{address}] success.")
    return 0


async def set_consume_mode(admin, args, out) -> int:
    body = orjson.dumps({"topic": args.topic, "consumerGroup": args.group, "mode": args.mode,
                         "popShareQueueNum": args.pop_share_queue_num})
    for _, address in await masters(admin, args):
        await invoke(admin, address, RequestCode.SET_MESSAGE_REQUEST_MODE, body=body)
        out.line(f"set consume mode to {address} success.")
    out.line(f"topic[{args.topic}] group[{args.group}] consume mode[{args.mode}] "
             f"popShareQueueNum[{args.pop_share_queue_num}]")
    return 0


async def get_consume_mode(admin, args, out) -> int:
    rows = []
    for _, address in await masters(admin, args):
        response = await invoke(admin, address, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE)
        table = fastjson.loads(response.body or b"{}").get("messageRequestModeMap", {})
        for topic, groups in sorted(table.items()):
            for group, mode in sorted(groups.items()):
                if (args.topic or topic) == topic and (args.group or group) == group:
                    rows.append([address, topic, group, mode.get("mode", ""),
                                 mode.get("popShareQueueNum", 0)])
    out.table(["Broker Addr", "Topic", "Group", "Mode", "PopShareQueueNum"], rows)
    return 0


def queue_entries(document) -> list[tuple[dict, dict]]:
    return [(fastjson.loads(key) if isinstance(key, str) else key, value)
            for key, value in document.get("offsetTable", {}).items()]


async def consumer_progress(admin, args, out) -> int:
    rows, tps, diff, inflight_total = [], 0.0, 0, 0
    for _, address in await masters(admin, args):
        try:
            document = await admin.consume_stats(address, args.group, args.topic or "")
        except Exception:      # a broker that does not know the group
            continue
        tps += document.get("consumeTps", 0.0)
        for queue, entry in queue_entries(document):
            lag = entry["brokerOffset"] - entry["consumerOffset"]
            diff += lag
            # 5.x: pulled (or popped) and not committed (acknowledged); 4.x brokers omit it.
            inflight = max(entry.get("pullOffset", 0) - entry["consumerOffset"], 0)
            inflight_total += inflight
            last = entry.get("lastTimestamp", 0)
            rows.append([queue["topic"], queue["brokerName"], queue["queueId"],
                         entry["brokerOffset"], entry["consumerOffset"], lag, inflight,
                         time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last / 1000))
                         if last else "N/A"])
    if not rows:
        refusal = await _no_progress_reason(admin, args)
        if refusal is not None:
            out.progress(f"pybroker admin consumerProgress: {refusal}")
            return 1
    rows.sort(key=lambda row: (row[0], row[1], row[2]))
    columns = ["Topic", "Broker Name", "QID", "Broker Offset", "Consumer Offset", "Diff",
               "Inflight", "LastTime"]
    out.table(columns, rows, {"consumeTps": tps, "diffTotal": diff,
                              "inflightTotal": inflight_total,
                              "queues": [dict(zip(columns, row, strict=True))
                                         for row in rows]})
    out.line(f"\nConsume TPS: {tps:.2f}\nDiff Total: {diff}\nInflight Total: {inflight_total}")
    return 0


async def _no_progress_reason(admin, args) -> str | None:
    """Why a group with no queue offsets anywhere has no progress to show, as mqadmin
    refuses it (CONSUMER_NOT_ONLINE / BROADCAST_CONSUMPTION), or None when it is online."""
    connection = await _connections(admin, args, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                    {"consumerGroup": args.group})
    if connection is None:
        return (f"the consumer group [{args.group}] has no offsets on any broker and no "
                f"client online: check the group name (mqadmin: \"Not found the consumer "
                f"group consume stats ... maybe the consumer not online\")")
    if connection.get("messageModel") == "BROADCASTING":
        return (f"the consumer group [{args.group}] consumes in broadcast mode: its offsets "
                f"live in its clients, not on the brokers")
    return None


async def _connections(admin, args, code: int, fields: dict) -> dict | None:
    for _, address in await masters(admin, args):
        response = await admin.instance.invoke(address, request(code, dict(fields)))
        if response.code == ResponseCode.SUCCESS:
            return fastjson.loads(response.body or b"{}")
    return None


async def consumer_connection(admin, args, out) -> int:
    document = await _connections(admin, args, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                  {"consumerGroup": args.group})
    if document is None:
        out.progress(f"the consumer group [{args.group}] is not online")
        return 1
    rows = [[connection["clientId"], connection["clientAddr"], connection["language"],
             connection["version"]] for connection in document.get("connectionSet", [])]
    out.table(["ClientId", "ClientAddr", "Language", "Version"], sorted(rows), document)
    if not out.json:
        out.line(f"\nconsumeType: {document.get('consumeType')}  messageModel: "
                 f"{document.get('messageModel')}  consumeFromWhere: "
                 f"{document.get('consumeFromWhere')}")
    return 0


async def producer_connection(admin, args, out) -> int:
    route = await admin.topic_route(args.topic)
    rows, seen = [], set()
    for broker in route.broker_datas if route else []:
        address = broker.broker_addrs.get(MASTER_ID)
        if address is None:
            continue
        try:
            connections = await admin.producer_connection(address, args.group)
        except Exception:
            continue
        for connection in connections:
            if connection["clientId"] not in seen:
                seen.add(connection["clientId"])
                rows.append([connection["clientId"], connection["clientAddr"],
                             connection["language"], connection["version"]])
    out.table(["ClientId", "ClientAddr", "Language", "Version"], sorted(rows))
    return 0 if rows else 1


def _timestamp_ms(text: str) -> int:
    if text == "now":
        return time.time_ns() // 1_000_000
    if text.lstrip("-").isdigit():
        return int(text)
    moment = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    return int(moment.timestamp() * 1000)


async def reset_offset_by_time(admin, args, out) -> int:
    timestamp = _timestamp_ms(args.timestamp)
    fields = {"topic": args.topic, "group": args.group, "timestamp": str(timestamp),
              "isForce": args.force}
    rows = []
    route = await admin.topic_route(args.topic)
    for broker in route.broker_datas if route else []:
        address = broker.broker_addrs.get(MASTER_ID)
        response = await admin.instance.invoke(address, request(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, dict(fields)))
        if response.code == ResponseCode.CONSUMER_NOT_ONLINE:
            # mqadmin's fallback: commit the offsets of the time directly.
            rows += await _reset_offline(admin, address, args, timestamp)
            continue
        check_response(response, address)
        for queue, offset in queue_entries(fastjson.loads(response.body or b"{}")):
            rows.append([queue["brokerName"], queue["queueId"], offset])
    out.table(["Broker Name", "Queue ID", "Offset"], sorted(rows))
    return 0


async def _reset_offline(admin, address: str, args, timestamp: int) -> list[list]:
    """Java's resetOffsetByTimestampOld: per queue the offset of the time, committed with
    UPDATE_CONSUMER_OFFSET (only backwards unless forced)."""
    document = await admin.consume_stats(address, args.group, args.topic)
    rows = []
    for queue_json, entry in queue_entries(document):
        queue = MessageQueue(queue_json["topic"], queue_json["brokerName"],
                             queue_json["queueId"])
        offset = await queue_offset_query(admin.instance, queue,
                                          RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp)
        if args.force == "true" or offset < entry["consumerOffset"]:
            await invoke(admin, address, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": args.group, "topic": queue.topic,
                "queueId": str(queue.queue_id), "commitOffset": str(offset)})
        else:
            offset = entry["consumerOffset"]
        rows.append([queue.broker_name, queue.queue_id, offset])
    return rows


def message_fields(message) -> dict:
    return {"Topic": message.topic, "Tags": message.tags or "", "Keys": " ".join(message.keys),
            "Queue ID": message.queue_id, "Queue Offset": message.queue_offset,
            "CommitLog Offset": message.physical_offset,
            "Reconsume Times": message.reconsume_times,
            "Born Timestamp": message.born_timestamp, "Store Timestamp": message.store_timestamp,
            "Born Host": message.born_host, "Store Host": message.store_host,
            "Message ID": message.msg_id, "Offset Message ID": message.offset_msg_id,
            "Properties": dict(message.properties),
            "Body": message.body.decode("utf-8", "replace")}


async def query_msg_by_id(admin, args, out) -> int:
    out.pairs(message_fields(await admin.view_message(args.msg_id)))
    return 0


async def _query_by_key(admin, args, out, unique: bool) -> int:
    key = args.msg_id if unique else args.key
    messages = await admin.query_message_by_key(args.topic, key, max_num=args.max_num,
                                                unique_key=unique)
    rows = [[m.msg_id, m.offset_msg_id, m.queue_id, m.queue_offset] for m in messages]
    out.table(["Message ID", "Offset Message ID", "QID", "Offset"], rows,
              [message_fields(m) for m in messages])
    return 0 if messages else 1


async def query_msg_by_key(admin, args, out) -> int:
    return await _query_by_key(admin, args, out, unique=False)


async def query_msg_by_unique_key(admin, args, out) -> int:
    return await _query_by_key(admin, args, out, unique=True)


async def _read_queue(admin, queue: MessageQueue, start: int, end: int, subscription,
                      group: str, limit: int):
    """Messages of ``queue`` in [start, end), at most ``limit``."""
    offset, taken = start, 0
    while offset < end and taken < limit:
        result = await pull_message(admin.instance, group, queue, offset, subscription,
                                    max_nums=min(PULL_BATCH_MAX, limit - taken),
                                    suspend_timeout_ms=0, timeout_ms=10_000,
                                    post_subscription=True)
        if result.next_begin_offset <= offset:
            break
        for message in result.messages[:limit - taken]:
            taken += 1
            yield message
        offset = result.next_begin_offset


async def _topic_messages(admin, args, out, group: str, limit: int):
    route = await admin.topic_route(args.topic)
    if route is None:
        out.progress(f"topic {args.topic} has no route")
        return
    subscription = bodies.build_subscription(args.topic, getattr(args, "sub_expression", "*")
                                             or "*")
    stats = await admin.topic_stats(args.topic)
    for queue in sorted(subscribe_queues(args.topic, route),
                        key=lambda q: (q.broker_name, q.queue_id)):
        if getattr(args, "queue_id", None) is not None and queue.queue_id != args.queue_id:
            continue
        bounds = stats.get(queue)
        if bounds is None:
            continue
        start = bounds.min_offset if getattr(args, "offset", None) is None else args.offset
        async for message in _read_queue(admin, queue, start, bounds.max_offset, subscription,
                                         group, limit):
            limit -= 1
            yield message
        if limit <= 0:
            return


async def print_msg(admin, args, out) -> int:
    rows, documents = [], []
    async for message in _topic_messages(admin, args, out, ADMIN_CONSUMER_GROUP, args.count):
        rows.append([message.msg_id, message.queue_id, message.queue_offset,
                     message.body.decode(args.charset, "replace")])
        documents.append(message_fields(message))
    out.table(["MSGID", "QID", "Offset", "BODY"], rows, documents)
    return 0


async def consume_message(admin, args, out) -> int:
    rows, documents = [], []
    async for message in _topic_messages(admin, args, out, args.group, args.count):
        rows.append([message.msg_id, message.queue_id, message.queue_offset,
                     message.body.decode("utf-8", "replace")])
        documents.append(message_fields(message))
        if len(rows) % 100 == 0:
            out.progress(f"consumed {len(rows)} messages ...")
    out.table(["MSGID", "QID", "Offset", "BODY"], rows, documents)
    out.progress(f"consumed {len(rows)} messages")
    return 0


async def send_message(admin, args, out) -> int:
    producer = Producer(ADMIN_PRODUCER_GROUP, args.namesrv_addr)
    await producer.start()
    try:
        message = Message(args.topic, args.body, tags=args.tags, keys=args.keys)
        queue = None
        if args.broker_name and args.queue_id is not None:
            queue = MessageQueue(args.topic, args.broker_name, args.queue_id)
        result = await producer.send(message, queue=queue)
    finally:
        await producer.shutdown()
    out.table(["Broker Name", "QID", "Send Result", "MsgId"],
              [[result.message_queue.broker_name, result.message_queue.queue_id,
                result.status.name, result.msg_id]])
    return 0


_BROKER_OR_CLUSTER: tuple[Option, ...] = (("-b", "broker_addr", {}), ("-c", "cluster", {}))
COMMANDS: dict[str, Command] = {
    "updateSubGroup": (update_sub_group, "create or update a subscription group", (
        ("-g", "group", {"required": True}), *_BROKER_OR_CLUSTER,
        ("-s", "consume_enable", {"default": "true"}),
        ("-m", "consume_from_min", {"default": "true"}),
        ("-d", "broadcast", {"default": "true"}),
        ("-q", "retry_queue_nums", {"type": int, "default": 1}),
        ("-r", "retry_max_times", {"type": int, "default": 16}),
        ("-o", "consume_message_orderly", {"default": "false",
                                           "help": "5.x: the group consumes in order"}))),
    "deleteSubGroup": (delete_sub_group, "delete a subscription group and its offsets", (
        ("-g", "group", {"required": True}), *_BROKER_OR_CLUSTER)),
    "setConsumeMode": (set_consume_mode, "5.x: a group consumes a topic by PULL or POP", (
        ("-t", "topic", {"required": True}), ("-g", "group", {"required": True}),
        ("-m", "mode", {"required": True, "choices": ("PULL", "POP")}),
        ("-q", "pop_share_queue_num", {"type": int, "default": 0}), *_BROKER_OR_CLUSTER)),
    "getConsumeMode": (get_consume_mode, "5.x: the consume modes set on the brokers "
                       "(pybroker's own; mqadmin has no such command)", (
        ("-t", "topic", {}), ("-g", "group", {}), *_BROKER_OR_CLUSTER)),
    "consumerProgress": (consumer_progress, "a group's offsets, lag and consume TPS", (
        ("-g", "group", {"required": True}), ("-t", "topic", {}), *_BROKER_OR_CLUSTER)),
    "consumerConnection": (consumer_connection, "a consumer group's live clients", (
        ("-g", "group", {"required": True}), *_BROKER_OR_CLUSTER)),
    "producerConnection": (producer_connection, "a producer group's live clients", (
        ("-g", "group", {"required": True}), ("-t", "topic", {"required": True}))),
    "resetOffsetByTime": (reset_offset_by_time, "move a group's offsets to a time", (
        ("-g", "group", {"required": True}), ("-t", "topic", {"required": True}),
        ("-s", "timestamp", {"required": True,
                             "help": "ms, 'now' or yyyy-MM-dd#HH:mm:ss:SSS"}),
        ("-f", "force", {"default": "true"}))),
    "queryMsgById": (query_msg_by_id, "a message by its offset message id", (
        ("-i", "msg_id", {"required": True}), ("-t", "topic", {}))),
    "queryMsgByKey": (query_msg_by_key, "messages by key (index)", (
        ("-t", "topic", {"required": True}), ("-k", "key", {"required": True}),
        ("-m", "max_num", {"type": int, "default": 64}))),
    "queryMsgByUniqueKey": (query_msg_by_unique_key, "a message by its client id", (
        ("-i", "msg_id", {"required": True}), ("-t", "topic", {"required": True}),
        ("-m", "max_num", {"type": int, "default": 32}))),
    "printMsg": (print_msg, "print the messages of a topic", (
        ("-t", "topic", {"required": True}), ("-c", "charset", {"default": "utf-8"}),
        ("-s", "sub_expression", {"default": "*"}),
        ("-m", "count", {"type": int, "default": 1000}))),
    "sendMessage": (send_message, "send one message", (
        ("-t", "topic", {"required": True}), ("-p", "body", {"required": True}),
        ("-k", "keys", {}), ("-c", "tags", {}), ("-b", "broker_name", {}),
        ("-i", "queue_id", {"type": int}))),
    "consumeMessage": (consume_message, "pull messages of a topic (no offset commit)", (
        ("-t", "topic", {"required": True}), ("-g", "group", {"default": ADMIN_CONSUMER_GROUP}),
        ("-i", "queue_id", {"type": int}), ("-o", "offset", {"type": int}),
        ("-c", "count", {"type": int, "default": 128}))),
}
