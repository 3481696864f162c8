# Store outcome enums (Java PutMessageStatus / GetMessageStatus) and THE one table to responses.
"""Expected store outcomes and the single status -> (ResponseCode, remark) tables.

Every handler translates store results through :func:`send_response` and
:func:`pull_response`; there is no other switch on these statuses (style.md §8.6, rule 10).
Mappings and remarks follow the Java broker's SendMessageProcessor / PullMessageProcessor
(protocol.md §2.2 and §2.3).
"""
import enum

from pybroker.protocol.codes import ResponseCode


class PutStatus(enum.Enum):
    """Outcome of appending to the CommitLog (PutMessageStatus + AppendMessageStatus)."""
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    # Append-level outcomes (Java AppendMessageStatus); END_OF_FILE is internal: the CommitLog
    # rolls and retries, so a handler only sees it if the retry failed too.
    END_OF_FILE = "END_OF_FILE"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    # Fast failure (Java BrokerFastFailure): the put waited in its remoting worker longer than
    # waitTimeMillsInSendQueue and was withdrawn before the appender took it; never stored.
    TIMEOUT_CLEAN_QUEUE = "TIMEOUT_CLEAN_QUEUE"
    # Controller mode: the SyncStateSet is smaller than minInSyncReplicas; never stored.
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    # The 5.x timer's put-time checks (broker/timer_message.py; Java HookUtils): a timer
    # message while timerWheelEnable=false, a bad or too long delay (or a cancel mark whose
    # time is past), a slot over timerCongestNumEachSlot. Never stored.
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    WHEEL_TIMER_FLOW_CONTROL = "WHEEL_TIMER_FLOW_CONTROL"

    @property
    def stored(self) -> bool:
        """True when the message is in the CommitLog (success or a late flush/replica)."""
        # PUT_OK by identity first: the set's lookup hashes the member in Python (Enum.__hash__).
        return self is _PUT_OK or self in _PUT_STORED


_PUT_OK = PutStatus.PUT_OK
_PUT_STORED = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT,
                         PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE})
# The outcomes PutStatus.stored is true of, for a hot path's ``status in STORED_STATUSES``: a
# tuple is searched by identity in C, where the property is a Python call (and a set's lookup
# hashes the member in Python).
STORED_STATUSES = tuple(status for status in PutStatus if status.stored)


class GetStatus(enum.Enum):
    """Outcome of reading a consume queue (Java GetMessageStatus)."""
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    # pybroker: the record at the request's offset fails its check (layout, own offset, body
    # CRC); never served. Answered PULL_OFFSET_MOVED with the next offset: a Java consumer
    # logs it (OFFSET_ILLEGAL, "the pull request offset illegal") and continues there, where
    # an error code would make it retry the same offset every 3 s for ever.
    MESSAGE_DAMAGED = "MESSAGE_DAMAGED"


MESSAGE_ILLEGAL_REMARK = ("the message is illegal, maybe msg body or properties length not "
                          "matched. msg body length limit {max_message_size}B, msg properties "
                          "length limit 32KB.")
SERVICE_NOT_AVAILABLE_REMARK = (
    "service not available now. It may be caused by one of the following reasons: the broker's "
    "disk is full [{disk_usage}], messages are put to the slave, message store has been shut "
    "down, etc.")

# THE send table: status -> (response code, remark template or None).
SEND_RESPONSE_TABLE: dict[PutStatus, tuple[ResponseCode, str | None]] = {
    PutStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, None),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, None),
    PutStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, None),
    PutStatus.CREATE_MAPPED_FILE_FAILED: (
        ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken."),
    PutStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, MESSAGE_ILLEGAL_REMARK),
    PutStatus.PROPERTIES_SIZE_EXCEEDED: (ResponseCode.MESSAGE_ILLEGAL, MESSAGE_ILLEGAL_REMARK),
    PutStatus.MESSAGE_SIZE_EXCEEDED: (ResponseCode.MESSAGE_ILLEGAL, MESSAGE_ILLEGAL_REMARK),
    PutStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE, SERVICE_NOT_AVAILABLE_REMARK),
    PutStatus.OS_PAGE_CACHE_BUSY: (
        ResponseCode.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while"),
    PutStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
    PutStatus.END_OF_FILE: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR DEFAULT"),
    PutStatus.TIMEOUT_CLEAN_QUEUE: (
        ResponseCode.SYSTEM_BUSY, "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a "
        "while, period in queue: {waited_ms}ms, size of queue: {queue_size}"),
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: (ResponseCode.SYSTEM_ERROR,
                                            "in-sync replicas not enough"),
    PutStatus.WHEEL_TIMER_NOT_ENABLE: (
        ResponseCode.SYSTEM_ERROR,
        "accurate timer message is not enabled, timerWheelEnable is {timer_wheel_enable}"),
    PutStatus.WHEEL_TIMER_MSG_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "timer message illegal, the delay time should not be bigger than the max delay "
        "{timer_max_delay_ms}ms; or if set del msg, the delay time should be bigger than the "
        "current time"),
    PutStatus.WHEEL_TIMER_FLOW_CONTROL: (
        ResponseCode.SYSTEM_ERROR,
        "timer message is under flow control, max num limit is {timer_congest_twice} or the "
        "current value is greater than {timer_congest} and less than {timer_congest_twice}, "
        "trigger random flow control"),
}
assert set(SEND_RESPONSE_TABLE) == set(PutStatus), "every PutStatus needs a response"


def send_response(status: PutStatus, max_message_size: int = 4_194_304,
                  disk_usage: str = "", waited_ms: int = 0,
                  queue_size: int = 0, timer=None) -> tuple[ResponseCode, str | None]:
    """(response code, remark) answering a send whose store outcome is ``status``.

    ``max_message_size`` (bytes), ``disk_usage``, ``waited_ms`` and ``queue_size`` (fast
    failure) fill the Java remark templates; ``timer`` (the broker's
    broker.timer_message.TimerRules, or None for Java's defaults) fills the timer ones.
    """
    code, remark = SEND_RESPONSE_TABLE[status]
    if remark is not None:
        congest = (1 << 31) - 1 if timer is None else timer.congest_num_each_slot
        remark = remark.format(
            max_message_size=max_message_size, disk_usage=disk_usage, waited_ms=waited_ms,
            queue_size=queue_size,
            timer_wheel_enable="true" if timer is None or timer.wheel_enable else "false",
            timer_max_delay_ms=(259_200 if timer is None else timer.max_delay_sec) * 1000,
            timer_congest=congest, timer_congest_twice=congest * 2)
    return code, remark


# THE pull table: status -> (code when the request offset is 0, code otherwise).
PULL_RESPONSE_TABLE: dict[GetStatus, tuple[ResponseCode, ResponseCode]] = {
    GetStatus.FOUND: (ResponseCode.SUCCESS, ResponseCode.SUCCESS),
    GetStatus.NO_MATCHED_MESSAGE: (ResponseCode.PULL_RETRY_IMMEDIATELY,
                                   ResponseCode.PULL_RETRY_IMMEDIATELY),
    GetStatus.MESSAGE_WAS_REMOVING: (ResponseCode.PULL_RETRY_IMMEDIATELY,
                                     ResponseCode.PULL_RETRY_IMMEDIATELY),
    GetStatus.OFFSET_FOUND_NULL: (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_NOT_FOUND),
    GetStatus.OFFSET_OVERFLOW_ONE: (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_NOT_FOUND),
    GetStatus.OFFSET_OVERFLOW_BADLY: (ResponseCode.PULL_OFFSET_MOVED,
                                      ResponseCode.PULL_OFFSET_MOVED),
    GetStatus.OFFSET_TOO_SMALL: (ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_OFFSET_MOVED),
    # An unknown or empty queue is "not found" at offset 0 and "moved" anywhere else.
    GetStatus.NO_MATCHED_LOGIC_QUEUE: (ResponseCode.PULL_NOT_FOUND,
                                       ResponseCode.PULL_OFFSET_MOVED),
    GetStatus.NO_MESSAGE_IN_QUEUE: (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED),
    GetStatus.MESSAGE_DAMAGED: (ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_OFFSET_MOVED),
}
assert set(PULL_RESPONSE_TABLE) == set(GetStatus), "every GetStatus needs a response"


def pull_response(status: GetStatus, request_queue_offset: int) -> tuple[ResponseCode, None]:
    """(response code, remark) answering a pull at ``request_queue_offset`` with ``status``.

    The Java broker sets no remark on these codes; the remark is always None.
    """
    at_zero, elsewhere = PULL_RESPONSE_TABLE[status]
    return (at_zero if request_queue_offset == 0 else elsewhere), None
