"""5.x timer messages from the official Java 5.3.3 client behave on pybroker as on the Java 5.3.3
broker, and a store with timer messages still parked moves both ways between the two brokers,
each delivering what the other parked.

Method: one scenario over three brokers on one store. (1) A Java 5.3.3 broker: the Java 5.3.3
client (tools/java_compat/TimerClient.java) sends with setDeliverTimeMs / setDelayTimeSec /
setDelayTimeMs, a delay level, a past time, a too long delay, a TIMER_DELAY_SEC that is not a
number, a batch with timer properties, a message it then recalls (recallMessage) and one past the
roll window; a push consumer takes the short ones; then it parks a set due in ~45 s and stops.
(2) pybroker opens a copy of that store, the same client sends the same short set (answers and
delivered property maps are compared with Java's: same codes, remarks, recall handles, property
names), parks its own set due in ~75 s, and delivers Java's parked set at its time. (3) Java 5.3.3
opens a copy of pybroker's store and delivers pybroker's parked set at its time. Never early, at
most one precision (1 s) plus the brokers' latency late; pybroker stores the messages Java parked
with a delivery time at that time (a good part before their slot's end, where Java 5.3.3 stores
them). Skips without Java (fails under PYBROKER_REQUIRE_PEERS=1).
"""
import pathlib
import shutil
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests import peers, progress

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tools" / "java_compat" / "TimerClient.java"
TOPIC = "TimerCompatTopic"
java_rocketmq = peers.java_rocketmq
# Both brokers: the same file sizes (a store opens only at its sizes), a roll window of 4
# slots, recalls on.
SETTINGS = {"mappedFileSizeCommitLog": str(1024 * 1024), "mappedFileSizeConsumeQueue": str(60 * 20),
            "maxMessageSize": str(512 * 1024), "maxHashSlotNum": "1000", "maxIndexNum": "4000",
            "mappedFileSizeTimerLog": str(52 * 64 + 16), "timerRollWindowSlot": "4",
            "recallMessageEnable": "true", "timerFlushIntervalMs": "500"}
SHORT = ("deliver/deliver/3000,sec/sec/2,ms/ms/2500,past/past/5000,level/level/1,"
         "roll/sec/7,victim/sec/4,toofar/sec/345600,bad/raw/TIMER_DELAY_SEC=abc")
SHORT_DELIVERED = ("deliver", "sec", "ms", "past", "level", "roll", "b1", "b2")
BATCH = "b1/sec/30,b2/deliver/30000"
PRECISION_MS = 1000         # timerPrecisionMs: both brokers' default
_DELIVER_FORM = {str(number) for number in range(0, 20, 2)}    # _park's setDeliverTimeMs ones
LATE_MS = PRECISION_MS + 600    # one precision + the brokers' wake-up and re-put under CI load
ILLEGAL_REMARK = ("timer message illegal, the delay time should not be bigger than the max "
                  "delay 259200000ms; or if set del msg, the delay time should be bigger than "
                  "the current time")
# Properties whose values differ from broker to broker (times, ids, addresses).
VOLATILE = {"TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_OUT_MS", "TIMER_DELIVER_MS",
            "UNIQ_KEY", "CONSUME_START_TIME", "MIN_OFFSET", "MAX_OFFSET", "REAL_QID"}
# Java 5.3.3's send path stores MSG_REGION and TRACE_ON in every message when a send hook is
# registered (AbstractSendMessageProcessor.buildMsgContext); pybroker stores them in none (a
# 4.9.x broker's behaviour, tests/compat/test_property_fidelity.py): not a timer matter.
NOT_TIMER = {"MSG_REGION", "TRACE_ON"}


@pytest.fixture(scope="module")
def client():
    install = peers.java_install("5.3.3")
    return install, peers.compiled_java(install, SOURCE)


def _run(harness, classes, namesrv: str, run: str, timeout_s: int = 120, **options) -> list:
    args = [namesrv, f"topic={TOPIC}", f"run={run}",
            *(f"{key}={value}" for key, value in options.items())]
    done = harness.run_class("TimerClient", args, timeout_s=timeout_s + 60,
                             extra_classpath=[classes])
    results = [peers.parse_result_line(line) for line in done.stdout.splitlines()
               if line.startswith("RESULT ")]
    assert done.returncode == 0, f"TimerClient {run}:\n{done.stdout[-4000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    return results


def _start_java(install, work: pathlib.Path, store: pathlib.Path | None):
    java = java_rocketmq.JavaRocketMQ(work, install, free_ports=True, broker_overrides=SETTINGS)
    shutil.rmtree(java.store_dir, ignore_errors=True)
    if store is not None:
        _copy_store(store, java.store_dir)
    with progress.stage(f"Java RocketMQ 5.3.3 on {'a copied' if store else 'an empty'} store"):
        java.start()
    return java


def _copy_store(source: pathlib.Path, target: pathlib.Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("lock", "run"))
    assert not (target / "abort").exists(), "the broker did not stop cleanly"


def _prefixed(spec: str, run: str) -> str:
    return ",".join(f"{run}-{item}" for item in spec.split(","))


def _short_round(harness, classes, namesrv: str, run: str) -> dict:
    """The short set, keys prefixed with ``run`` (the topic also holds the other rounds'
    messages); results by op and unprefixed key."""
    results = _run(harness, classes, namesrv, run, send=_prefixed(SHORT, run),
                   batch=_prefixed(BATCH, run), recall=f"{run}-victim",
                   until=",".join(f"{run}-{key}" for key in SHORT_DELIVERED), timeout=40,
                   linger=3)
    by_op: dict = {}
    for result in results:
        key = result.get("key", result["op"])
        if result["op"] == "got" and not key.startswith(f"{run}-"):
            continue
        by_op.setdefault(result["op"], {})[key.removeprefix(f"{run}-")] = result
    return by_op


def _park(harness, classes, namesrv: str, run: str, delay_s: int, count: int) -> dict:
    """``count`` timer messages due in ``delay_s`` to ``delay_s`` + 4 s: odd numbers with a delay
    (setDelayTimeSec), even ones with a delivery time (setDeliverTimeMs, which keeps its time
    across rolls; a delay counts again from each roll's store). Returns key -> due time."""
    keys = [f"{run}-{number}" for number in range(count)]
    spec = ",".join(f"{key}/sec/{delay_s + number % 5}" if number % 2
                    else f"{key}/deliver/{(delay_s + number % 5) * 1000 + number * 37}"
                    for number, key in enumerate(keys))
    sent = {r["key"]: r for r in _run(harness, classes, namesrv, run, send=spec)
            if r["op"] == "sent"}
    assert sorted(sent) == sorted(keys) and all(r["status"] == "SEND_OK" for r in sent.values())
    return {key: int(sent[key]["sentMs"]) + (delay_s + number % 5) * 1000 if number % 2
            else int(sent[key]["deliverMs"]) for number, key in enumerate(keys)}


def _await_parked(harness, classes, namesrv: str, run: str, due: dict) -> int:
    """Wait for the parked set ``due`` (key -> due time): each delivered once, never early, at
    most a precision and the latency late. Returns how many of those sent with a delivery time
    were stored before the end of their slot (TIMER_OUT_MS, the slot's start, + the 1 s
    precision): at their own time rather than at the slot's end."""
    wait_s = max(due.values()) / 1000 - time.time() + 30
    got = _run(harness, classes, namesrv, run, until=",".join(due), timeout=int(wait_s),
               linger=2)
    arrivals: dict = {}
    slot_ends: dict = {}
    for result in got:
        if result["op"] == "got" and result["key"] in due:
            arrivals.setdefault(result["key"], []).append(int(result["storeMs"]))
            props = dict(pair.split("=", 1) for pair in result["props"].split("&"))
            slot_ends[result["key"]] = int(props["TIMER_OUT_MS"]) + PRECISION_MS
    assert sorted(arrivals) == sorted(due)
    for key, stores in arrivals.items():
        assert len(stores) == 1, f"{key} delivered {len(stores)} times"
        assert due[key] <= stores[0] <= due[key] + LATE_MS + 500, (key, due[key], stores[0])
    return sum(stores[0] < slot_ends[key] for key, stores in arrivals.items()
               if key.rsplit("-", 1)[1] in _DELIVER_FORM)


def _check_short(round_: dict, name: str) -> None:
    sent, errors, got = round_["sent"], round_["sendError"], round_["got"]
    for key in ("deliver", "sec", "ms", "roll", "victim"):
        assert sent[key]["recallHandle"] != "null", (name, key)
    for key in ("past", "level"):
        assert sent[key]["recallHandle"] == "null", (name, key)
    for key in ("toofar", "bad"):
        assert (errors[key]["code"], errors[key]["remark"]) == ("13", ILLEGAL_REMARK), name
    assert round_["recalled"]["victim"]["msgId"] == sent["victim"]["msgId"], name
    assert "victim" not in got, f"{name}: a recalled message was delivered"
    assert sorted(got) == sorted(SHORT_DELIVERED), name
    delays = {"deliver": 3000, "sec": 2000, "ms": 2500, "roll": 7000, "level": 1000}
    for key, delay_ms in delays.items():
        store_ms, sent_ms = int(got[key]["storeMs"]), int(sent[key]["sentMs"])
        assert sent_ms + delay_ms <= store_ms, (name, key, "early")
        assert store_ms <= int(sent[key]["answeredMs"]) + delay_ms + LATE_MS, (name, key)
    roll = dict(pair.split("=", 1) for pair in got["roll"]["props"].split("&"))
    assert int(roll["TIMER_ROLL_TIMES"]) >= 1, name


def _property_names(round_: dict) -> dict:
    """Property names of what the timer (and the delay level) delivered; the plain stores
    (past, the batch) follow the broker's general rules (a 5.3.3 broker also keeps WAIT in
    them), which tests/compat/test_property_fidelity.py covers."""
    return {key: {pair.split("=", 1)[0] for pair in result["props"].split("&")}
            - VOLATILE - NOT_TIMER for key, result in round_["got"].items()
            if key in ("deliver", "sec", "ms", "roll", "level")}


def test_java_client_timers_and_parked_stores_across_java_and_pybroker(client, tmp_path):
    install, classes = client
    java = _start_java(install, tmp_path / "java1", None)
    try:
        assert "success" in java.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", TOPIC)
        java_round = _short_round(java, classes, java.namesrv_addr, "java")
        java_parked = _park(java, classes, java.namesrv_addr, "jpark", 45, 20)
    finally:
        java.stop()
    _check_short(java_round, "java")
    _copy_store(java.store_dir, tmp_path / "py" / "store")
    with StandaloneBroker(tmp_path / "py", SETTINGS) as broker:
        py_round = _short_round(java, classes, broker.namesrv_addr, "py")
        py_parked = _park(java, classes, broker.namesrv_addr, "ppark", 75, 20)
        own_time = _await_parked(java, classes, broker.namesrv_addr, "jdrain", java_parked)
    # pybroker delivers the messages Java parked with a delivery time at that time, within
    # their slot (they roll: the roll window is 4 slots; TIMER_DELIVER_MS keeps the time):
    # those whose time falls early in its second are stored before the slot's end (at the
    # slot's end, where Java 5.3.3 stores them, none would be; about half of the 10 are
    # expected, 3 asked for under CI load).
    assert own_time >= 3, f"{own_time} of 10 stored before their slot's end"
    _check_short(py_round, "pybroker")
    assert _property_names(py_round) == _property_names(java_round)
    java_again = _start_java(install, tmp_path / "java2", tmp_path / "py" / "store")
    try:
        _await_parked(java_again, classes, java_again.namesrv_addr, "pdrain", py_parked)
    finally:
        java_again.stop()
