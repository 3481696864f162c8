# Every form a producer sends a message in, as raw remoting requests (durability tests).
"""The send forms of the acknowledgement tests, built as raw remoting requests.

A form is a request code (SEND_MESSAGE 10 with the long header names, SEND_MESSAGE_V2 310 and
SEND_BATCH_MESSAGE 320 with the one-letter names), a batch size for 320 (one message, as the
Java producer's ``send(Collection)`` with one element sends it, or several), a header encoding
(JSON, or ROCKETMQ binary as the Java producer sends it) and the broker path it takes: the C
send fast path, or the Python handlers - a non-ASCII property value is what the fast path leaves
to them (pybroker/_fast/send/read.pyx), the stored record is the same kind either way.
"""
import dataclasses
import glob
import itertools
import os
import signal
import time

import psutil

from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import SerializeType
from pybroker.remoting.client import SyncRemotingClient

_SHORT_NAMES = dict(zip(["producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums",
                         "queueId", "sysFlag", "bornTimestamp", "flag", "properties",
                         "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch"],
                        "abcdefghijklm", strict=True))
BATCH_MANY = 3


@dataclasses.dataclass(frozen=True)
class SendForm:
    code: int
    batch_size: int          # 0: a single message
    encoding: SerializeType
    path: str                # "fast" or "python"
    timer: bool = False      # a 5.x timer message due in a day (parked on rmq_sys_wheel_timer)

    @property
    def name(self) -> str:
        shape = f"batch{self.batch_size}" if self.batch_size else "single"
        return f"{int(self.code)}-{shape}-{self.encoding.name}-{self.path}" + (
            "-timer" if self.timer else "")

    @property
    def messages(self) -> int:
        return self.batch_size or 1

    def client(self) -> SyncRemotingClient:
        """A client whose requests use this form's header encoding."""
        return SyncRemotingClient(serialize_type=int(self.encoding))

    def request(self, topic: str, queue_id: int, tag: str, pad_bytes: int = 0):
        """The request of this form carrying message(s) ``tag``-0, ``tag``-1, ... whose
        UNIQ_KEYs are the same texts (each body that text, then ``pad_bytes`` more)."""
        pad = b"." * pad_bytes
        values = {"TAGS": "T", "WAIT": "true"}
        if self.path == "python":
            values["PATH"] = "h\u00e4ndler"
        if self.timer:
            values["TIMER_DELIVER_MS"] = str(time.time_ns() // 1_000_000 + 86_400_000)
        if self.batch_size:
            body = batch_body([(f"{tag}-{index}".encode() + pad,
                                f"UNIQ_KEY\x01{tag}-{index}\x02")
                               for index in range(self.batch_size)])
        else:
            values["UNIQ_KEY"] = f"{tag}-0"
            body = f"{tag}-0".encode() + pad
        ext = {"producerGroup": "forms_producer", "topic": topic, "defaultTopic": "TBW102",
               "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": "0",
               "bornTimestamp": str(time.time_ns() // 1_000_000), "flag": "0",
               "properties": props.encode_properties(values), "reconsumeTimes": "0",
               "unitMode": "false", "maxReconsumeTimes": "16",
               "batch": "true" if self.batch_size else "false"}
        if self.code != RequestCode.SEND_MESSAGE:
            ext = {_SHORT_NAMES[name]: value for name, value in ext.items()}
        return create_request(self.code, ext, body)


def batch_body(messages) -> bytes:
    """A SEND_BATCH_MESSAGE body (MessageDecoder.encodeMessages): per message TOTALSIZE,
    MAGICCODE, BODYCRC, FLAG, body length and body, properties length and properties."""
    out = bytearray()
    for body, properties in messages:
        encoded = properties.encode()
        out += (22 + len(body) + len(encoded)).to_bytes(4, "big") + bytes(8)
        out += (0).to_bytes(4, "big") + len(body).to_bytes(4, "big") + body
        out += len(encoded).to_bytes(2, "big") + encoded
    return bytes(out)


ALL_FORMS = [SendForm(code, batch_size, encoding, path)
             for (code, batch_size), encoding, path in itertools.product(
                 [(RequestCode.SEND_MESSAGE, 0), (RequestCode.SEND_MESSAGE_V2, 0),
                  (RequestCode.SEND_BATCH_MESSAGE, 1),
                  (RequestCode.SEND_BATCH_MESSAGE, BATCH_MANY)],
                 [SerializeType.JSON, SerializeType.ROCKETMQ], ["fast", "python"])]


# Single timer sends, parked by the fast path and by the handler (a broker with the timer).
TIMER_FORMS = [SendForm(RequestCode.SEND_MESSAGE_V2, 0, SerializeType.JSON, "fast", True),
               SendForm(RequestCode.SEND_MESSAGE, 0, SerializeType.ROCKETMQ, "python", True)]


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    return [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]


def freeze(pids: list[int], timeout_s: float = 5.0) -> None:
    """SIGSTOP every process and wait until each of their threads is stopped: kill() returns
    before a busy multi-threaded process (a JVM: 50 threads) has stopped them all, and a
    thread still running meanwhile can acknowledge a send (seen: 24 of 53 still running 4 ms
    after the signal)."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout_s
    while not all(_all_threads_stopped(pid) for pid in pids):
        assert time.monotonic() < deadline, f"{pids} not stopped within {timeout_s} s"
        time.sleep(0.001)


def thaw(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGCONT)


def _all_threads_stopped(pid: int) -> bool:
    for stat in glob.glob(f"/proc/{pid}/task/*/stat"):
        try:
            with open(stat, encoding="ascii", errors="replace") as file:
                text = file.read()
        except OSError:
            continue                     # the thread ended
        if text[text.rindex(")") + 2] not in "tT":
            return False
    return True


@dataclasses.dataclass
class HeldAnswer:
    form: SendForm
    code: int              # the answer while the condition could not be met
    waited_s: float        # how long that answer took
    code_after: int        # the answer to the same form once the condition can be met again


def answers_while_stopped(address: str, topic: str, forms, stop, resume, caught_up,
                          timeout_ms: int) -> list[HeldAnswer]:
    """Each form in turn as the first request after ``stop()`` (the flusher or the only
    slave frozen), with everything before it flushed and replicated (``caught_up()`` true),
    so that the position its acknowledgement waits for is exactly its own last byte; then
    ``resume()`` and the same form again. Requests wait up to 4x ``timeout_ms`` (the
    timeout: syncFlushTimeout or slaveTimeout) for their answer."""
    found = []
    for number, form in enumerate(forms):
        with form.client() as client:
            client.connect(address)
            deadline = time.monotonic() + 30
            while not caught_up():
                assert time.monotonic() < deadline, "the broker did not catch up in 30 s"
                time.sleep(0.01)
            stop()
            try:
                started = time.monotonic()
                response = client.invoke(form.request(topic, number % 4, f"held{number}"),
                                         4 * timeout_ms)
                waited = time.monotonic() - started
            finally:
                resume()
            after = client.invoke(form.request(topic, number % 4, f"after{number}"),
                                  4 * timeout_ms)
        found.append(HeldAnswer(form, response.code, waited, after.code))
    return found
