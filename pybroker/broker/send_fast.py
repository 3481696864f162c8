# What the send fast path may do on its own: its topic table and its response templates.
"""The Python side of the send fast path (docs/architecture/send-fast-path.md).

:mod:`pybroker._fast.send.take` takes a send without the Python handler only when the handler
(:mod:`pybroker.broker.send`) would store it exactly as written and answer SUCCESS. This module
states that contract in these pieces, all derived from the Python path itself:

* :func:`fast_topics` - the topics whose checks in ``send._topic_config`` pass without doubt:
  known to the metadata (no auto-creation), a valid name producers may send to, not a %RETRY%
  topic (retry/DLQ redirects), not rmq_sys_wheel_timer (the handler keeps WAIT there), not
  an order topic on a broker without write permission, and at most 127 bytes. The Cython
  side checks the rest per request (queue id in range, body and properties within limits, no
  DELAY/TRAN_MSG/CLUSTER property, no transaction bits, ASCII; a 5.x timer property only on a
  single send it parks as the handler does, send/timer.pyx).
* :func:`response_templates` - the response header for each completion status, made by the
  same ``create_response`` and JSON encoder as the handler's answer, with sentinels where
  msgId, queueId, queueOffset and opaque go, then cut at the sentinels. The Cython side fills
  them in, so a fast answer is byte for byte the handler's answer. A parked timer message's
  answers (``recall_templates``) carry a sentinel for its recallHandle too.
* :func:`timer_settings` - what the fast path's timer rule needs, from the same settings
  the handler's ``TimerRules`` reads.
"""
import dataclasses

from pybroker.broker import send
from pybroker.protocol import headers
from pybroker.broker.timer_message import CONGEST_NEVER, TIMER_TOPIC, TimerRules
from pybroker.protocol.command import RemotingCommand, create_response, encode_json_header
from pybroker.protocol.constants import RETRY_GROUP_TOPIC_PREFIX, MessageSysFlag, Perm, Property
from pybroker.store import layout
from pybroker.store.status import PutStatus, send_response

_MSG_ID = "@@pb-msgId@@"
_QUEUE_ID = "@@pb-queueId@@"
_QUEUE_OFFSET = "@@pb-queueOffset@@"
_RECALL_HANDLE = "@@pb-recallHandle@@"
_OPAQUE = 2_000_000_001
_MULTI_TAGS = int(MessageSysFlag.MULTI_TAGS)


@dataclasses.dataclass(frozen=True)
class FastSendSettings:
    """What the fast path needs from the broker's config (see :func:`fast_send_settings`).

    ``templates[i]`` answers completion status code i (the index in ``statuses``), the last
    entry answers codes outside it (UNKNOWN_ERROR, as ring_putter does).
    """
    cluster_pair: bytes
    max_message_size: int
    frame_max_bytes: int
    ext_fields_max: int
    templates: list
    put_ok: int
    flush_timeout: int
    response_fields: dict
    slave_timeout: int
    slave_not_available: int
    recall_templates: list | None = None
    timer: "TimerSettings | None" = None


@dataclasses.dataclass(frozen=True)
class TimerSettings:
    """The fast path's timer rule settings (SendPath.set_timer's arguments after the
    templates)."""
    timer_topic: bytes
    message_type: int
    enabled: bool
    congestion_possible: bool
    congest_limit: int
    max_delay_ms: int
    precision_ms: int
    broker_name: bytes


def timer_settings(config) -> TimerSettings:
    """The timer settings of ``config``, read through the handler's own TimerRules."""
    rules = TimerRules.of(config.store)
    return TimerSettings(TIMER_TOPIC.encode(), send.message_type_label(TIMER_TOPIC),
                         rules.wheel_enable, rules.congest_num_each_slot < CONGEST_NEVER,
                         rules.congest_num_each_slot,
                         rules.max_delay_sec * 1000, rules.precision_ms,
                         config.broker.broker_name.encode())


def fast_send_settings(config, statuses: tuple) -> FastSendSettings:
    """The fast path's settings for ``config`` (a pybroker.config.Config); ``statuses`` is the
    completion code -> PutStatus tuple (ring_putter.PUT_STATUSES)."""
    fields = send.send_response_fields_of(config)
    max_message_size = config.store.max_message_size
    templates, recall_templates = [], []
    for status in (*statuses, PutStatus.UNKNOWN_ERROR):
        templates.append(response_template(status, fields, max_message_size))
        recall_templates.append(response_template(status, fields, max_message_size, True))
    cluster = config.broker.broker_cluster_name
    return FastSendSettings(
        cluster_pair=f"{Property.CLUSTER}\x01{cluster}\x02".encode(),
        max_message_size=max_message_size, frame_max_bytes=config.remoting.frame_max_bytes,
        ext_fields_max=config.remoting.ext_fields_max, templates=templates,
        put_ok=statuses.index(PutStatus.PUT_OK),
        flush_timeout=statuses.index(PutStatus.FLUSH_DISK_TIMEOUT), response_fields=fields,
        slave_timeout=statuses.index(PutStatus.FLUSH_SLAVE_TIMEOUT),
        slave_not_available=statuses.index(PutStatus.SLAVE_NOT_AVAILABLE),
        recall_templates=recall_templates, timer=timer_settings(config))


def response_template(status: PutStatus, fields: dict[str, str], max_message_size: int,
                      recall: bool = False) -> tuple[bool, tuple[bytes, ...], int]:
    """``(stored, pieces, code)`` of the answer to a send whose outcome is ``status``: the
    header is ``pieces[0] msgId pieces[1] queueId pieces[2] queueOffset pieces[3] opaque
    pieces[4]`` when stored, else ``pieces[0] opaque pieces[4]`` (handle_send_message's fields
    either way); ``code`` is its response code. ``recall``: the answer to a parked timer
    message, ``... queueOffset pieces[3] recallHandle pieces[5] opaque pieces[4]`` when stored
    (the handler adds it only then)."""
    code, remark = send_response(status, max_message_size)
    recall = recall and status.stored
    answer_fields = dict(fields)
    if status.stored:
        answer_fields.update(msgId=_MSG_ID, queueId=_QUEUE_ID, queueOffset=_QUEUE_OFFSET)
    if recall:
        answer_fields.update(recallHandle=_RECALL_HANDLE)
    request = RemotingCommand(0, opaque=_OPAQUE)
    header = encode_json_header(create_response(request, code, remark, answer_fields))
    markers = [f'"{_MSG_ID}"', f'"{_QUEUE_ID}"', f'"{_QUEUE_OFFSET}"'] if status.stored else []
    if recall:
        markers.append(f'"{_RECALL_HANDLE}"')
    pieces, rest = [], header
    for marker in [*(m.encode() for m in markers), str(_OPAQUE).encode()]:
        if rest.count(marker) != 1:
            raise ValueError(f"response template for {status}: marker {marker!r} is not unique")
        before, _, rest = rest.partition(marker)
        # The string markers keep their quotes in the template; the values go between them.
        quoted = marker.startswith(b'"')
        pieces.append(before + (b'"' if quoted else b""))
        if quoted:
            rest = b'"' + rest
    pieces.append(rest)
    if not status.stored:
        pieces = [pieces[0], b"", b"", b"", pieces[1]]
    elif recall:        # the piece after the handle goes last (answer.pxd PIECE_AFTER_RECALL)
        pieces = [*pieces[:4], pieces[5], pieces[4]]
    return status.stored, tuple(pieces), int(code)


def fast_topics(config, metadata) -> list[tuple[bytes, int, int]]:
    """``[(topic UTF-8, queue bound, extra sysFlag)]`` for :meth:`SendPath.set_topics`, from the
    topic configs ``metadata`` (a MetadataReplica) holds now."""
    broker_writable = bool(config.broker.broker_permission & Perm.WRITE)
    entries = []
    for topic, topic_config in metadata.topic_configs().items():
        if topic_config.order and not broker_writable:
            continue
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or topic == TIMER_TOPIC \
                or headers.validate_topic(topic) or headers.topic_not_allowed_to_send(topic):
            continue
        name = topic.encode()
        if len(name) > layout.TOPIC_MAX_BYTES_V1:
            continue
        extra = _MULTI_TAGS if topic_config.topic_filter_type == "MULTI_TAG" else 0
        entries.append((name, max(topic_config.write_queue_nums, topic_config.read_queue_nums),
                        extra))
    return entries
