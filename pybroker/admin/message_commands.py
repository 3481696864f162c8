# `pybroker admin` commands that find one message or its trace (mqadmin's names and letters).
"""queryMsgByOffset (the message at a queue offset), queryMsgTraceById (the trace records
clients with message trace on wrote for a message id)."""
import dataclasses
import time

from pybroker.admin.broker_commands import Command
from pybroker.admin.group_commands import ADMIN_CONSUMER_GROUP, message_fields
from pybroker.client.pulling import pull_message
from pybroker.protocol import bodies
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.constants import SystemTopic

__all__ = ["COMMANDS", "TraceView", "decode_trace_views"]

# Java's TraceConstants: records are split by FIELD_SPLITOR, a record's fields by CONTENT_SPLITOR.
CONTENT_SPLITOR, FIELD_SPLITOR = "\x01", "\x02"
QUERY_MAX_DEFAULT = 64


async def query_msg_by_offset(admin, args, out) -> int:
    queue = MessageQueue(args.topic, args.broker_name, args.queue_id)
    subscription = bodies.build_subscription(args.topic, "*")
    result = await pull_message(admin.instance, ADMIN_CONSUMER_GROUP, queue, args.offset,
                                subscription, max_nums=1, suspend_timeout_ms=0,
                                timeout_ms=10_000, post_subscription=True)
    if not result.messages:
        # mqadmin prints nothing for NO_NEW_MSG / NO_MATCHED_MSG / OFFSET_ILLEGAL.
        out.progress(f"no message at offset {args.offset} of {args.topic} queue "
                     f"{args.queue_id} on {args.broker_name} (its offsets: "
                     f"{result.min_offset} to {result.max_offset})")
        return 1
    fields = message_fields(result.messages[0])
    if args.body_format:
        fields["Body"] = result.messages[0].body.decode(args.body_format, "replace")
    out.pairs(fields)
    return 0


@dataclasses.dataclass(slots=True)
class TraceView:
    """One trace record of a message as mqadmin shows it (Java's TraceView)."""
    msg_type: str           # Pub, SubBefore, SubAfter, EndTransaction, Recall
    group: str
    client_host: str
    timestamp_ms: int
    cost_ms: int
    status: str             # success / failed


def decode_trace_views(msg_id: str, body: str, born_host: str) -> list[TraceView]:
    """The records of one trace message's body about ``msg_id`` (Java's
    TraceDataEncoder.decoderFromTraceDataString + TraceView.decodeFromTraceTransData);
    ``born_host`` is the trace message's born host, the client host mqadmin shows."""
    views = []
    for context in body.split(FIELD_SPLITOR):
        line = context.split(CONTENT_SPLITOR)
        view = _decode_record(line, born_host)
        if view is not None and view[0] == msg_id:
            views.append(view[1])
    return views


def _decode_record(line: list[str], host: str) -> tuple[str, TraceView] | None:
    kind = line[0]
    try:
        if kind == "Pub":
            success = line[13] if len(line) >= 14 else (line[12] if len(line) == 13 else "")
            return line[5], TraceView(kind, line[3], host, int(line[1]), int(line[10]),
                                      _status(success))
        if kind == "SubBefore":
            return line[5], TraceView(kind, line[3], host, int(line[1]), 0, "failed")
        if kind == "SubAfter":
            timestamp, group = (int(line[7]), line[8]) if len(line) >= 9 else (0, "")
            return line[2], TraceView(kind, group, host, timestamp, int(line[3]),
                                      _status(line[4]))
        if kind == "EndTransaction":
            return line[5], TraceView(kind, line[3], host, int(line[1]), 0, "failed")
        if kind == "Recall":
            return line[5], TraceView(kind, line[3], host, int(line[1]), 0, _status(line[6]))
    except (IndexError, ValueError):
        return None         # a record this version does not know how to read
    return None


def _status(text: str) -> str:
    return "success" if text.strip().lower() == "true" else "failed"


def _time_text(timestamp_ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp_ms / 1000))


async def query_msg_trace_by_id(admin, args, out) -> int:
    messages = await admin.query_message_by_key(
        args.trace_topic, args.msg_id, max_num=args.max_num,
        begin_timestamp_ms=args.begin_timestamp, end_timestamp_ms=args.end_timestamp)
    views = []
    for message in messages:
        host = (message.born_host or "").rsplit(":", 1)[0]
        views += decode_trace_views(args.msg_id, message.body.decode("utf-8", "replace"), host)
    if out.json:
        out.document([dataclasses.asdict(view) for view in views])
        return 0 if views else 1
    header = "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}"
    for view in views:
        if view.msg_type == "Pub":
            out.line(header.format("#Type", "#ProducerGroup", "#ClientHost", "#SendTime",
                                   "#CostTimes", "#Status"))
            out.line(header.format("Pub", view.group, view.client_host,
                                   _time_text(view.timestamp_ms), f"{view.cost_ms}ms",
                                   view.status) + "\n")
    consumers: dict[str, list[TraceView]] = {}
    for view in views:
        if view.msg_type == "SubAfter":
            consumers.setdefault(view.group, []).append(view)
    for group in sorted(consumers):
        out.line(header.format("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime",
                               "#CostTimes", "#Status"))
        for view in consumers[group]:
            out.line(header.format("Sub", view.group, view.client_host,
                                   _time_text(view.timestamp_ms), f"{view.cost_ms}ms",
                                   view.status))
        out.line("")
    if not views:
        out.progress(f"no trace of message {args.msg_id} in {args.trace_topic}")
    return 0 if views else 1


COMMANDS: dict[str, Command] = {
    "queryMsgByOffset": (query_msg_by_offset, "the message at a queue offset", (
        ("-t", "topic", {"required": True}),
        ("-b", "broker_name", {"required": True, "help": "broker name"}),
        ("-i", "queue_id", {"required": True, "type": int}),
        ("-o", "offset", {"required": True, "type": int, "help": "queue offset"}),
        ("-f", "body_format", {"help": "print the body in this charset"}))),
    "queryMsgTraceById": (query_msg_trace_by_id, "a message's trace (clients with message "
                          "trace on)", (
                              ("-i", "msg_id", {"required": True, "help": "message id"}),
                              ("-t", "trace_topic", {"default": str(SystemTopic.TRACE),
                                                     "help": "the trace topic"}),
                              ("-b", "begin_timestamp", {"type": int, "default": 0,
                                                         "help": "ms"}),
                              ("-e", "end_timestamp", {"type": int, "help": "ms"}),
                              ("-c", "max_num", {"type": int, "default": QUERY_MAX_DEFAULT}))),
}
