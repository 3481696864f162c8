# Compat: Java client features no other compat test covers, pybroker against Java 4.9.8.
"""Goal: request-reply (DefaultMQProducer.request, sync and async, RocketMQ 4.6+), message
trace (enableMsgTrace to RMQ_SYS_TRACE_TOPIC), the queue-offset API (search by time, lite pull
seek/commit), transactions (commit, rollback, check-back) and ordered sends with a selector
consumed orderly under a tag filter give a Java 4.9.8 client the same
results through pybroker as through the Java 4.9.8 broker.

Method: tools/java_compat/Features.java (the official Java 4.9.8 client) runs each op against
a Java 4.9.8 broker and against `pybroker standalone` (both with 1 s transaction checks); its
RESULT lines are checked for the same expected values on both. Missing Java skips (fails
under PYBROKER_REQUIRE_PEERS=1).
"""
import pathlib

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests import peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tools" / "java_compat" / "Features.java"
harness = peers.java_rocketmq
# Short transaction checks for the tx op (as tests/compat/test_property_fidelity.py).
BROKER_SETTINGS = {"transactionCheckInterval": "1000", "transactionTimeOut": "1000"}


def _run(rmq, classes, op: str, topic: str, timeout_s: int = 150) -> list[dict]:
    # Created first: a consumer of a topic that does not exist yet waits ~30 s for its route.
    assert "success" in rmq.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic)
    run = rmq.run_class("Features", [rmq.namesrv_addr, f"op={op}", f"topic={topic}",
                                     f"run={op}run"],
                        timeout_s=timeout_s, extra_classpath=[classes])
    results = [peers.parse_result_line(line) for line in run.stdout.splitlines()
               if line.startswith("RESULT ")]
    assert run.returncode == 0, f"Features {op} failed:\n{run.stdout[-4000:]}\n" \
                                f"{run.stderr[-3000:]}"
    return results


@pytest.fixture(scope="module")
def install():
    return peers.java_install("4.9.8")


@pytest.fixture(scope="module")
def classes(install):
    return peers.compiled_java(install, SOURCE)


@pytest.fixture(scope="module", params=["java", "pybroker"])
def rmq(request, install, tmp_path_factory):
    if request.param == "java":
        with peers.java_broker(tmp_path_factory.mktemp("java-features"), install,
                               broker_overrides=BROKER_SETTINGS) as running:
            yield running
    else:
        work = tmp_path_factory.mktemp("pybroker-features")
        with StandaloneBroker(work / "broker", BROKER_SETTINGS) as broker:
            client = harness.JavaRocketMQ(work / "client", install,
                                          namesrv_port=broker.namesrv_port)
            client.write_files()
            yield client


def test_request_reply(rmq, classes):
    results = _run(rmq, classes, "rpc", "RpcTopic")
    replies = [result for result in results if result["op"] == "reply"]
    assert [(r["kind"], r["body"]) for r in replies] == [
        ("sync", "reply-to-request-0"), ("sync", "reply-to-request-1"),
        ("sync", "reply-to-request-2"), ("async", "reply-to-request-async")], results
    assert {r["topic"] for r in replies if r["kind"] == "sync"} == {"DefaultCluster_REPLY_TOPIC"}
    assert all(r["correlated"] == "true" for r in replies if r["kind"] == "sync")


def test_message_trace(rmq, classes):
    results = _run(rmq, classes, "trace", "TracedTopic")
    (consumed,) = [result for result in results if result["op"] == "consumed"]
    (trace,) = [result for result in results if result["op"] == "trace"]
    assert consumed["count"] == "5"
    assert (trace["pub"], trace["subBefore"], trace["subAfter"]) == ("5", "5", "5"), results


def test_queue_offsets(rmq, classes):
    """Offsets of queue 0 after 10 sends with a pause after the fifth: min/max, searchOffset
    by time (Java 4.9: the nearest store time wins, the fourth message here; after the last
    message, the last one), the lite pull consumer's seek, offsetForTimestamp and commits."""
    results = {result["op"]: result for result in _run(rmq, classes, "offsets", "OffsetTopic")}
    queue, seek = results["queue"], results["seek"]
    assert (queue["min"], queue["max"]) == ("0", "10"), results
    assert (queue["searchMiddle"], queue["searchBefore"]) == ("4", "0"), results
    assert queue["searchAfter"] == "9" and queue["earliestInRange"] == "true", results
    assert (seek["first"], seek["body"]) == ("3", "offset-3"), results
    assert seek["offsetForTimestamp"] == "4", results
    committed = results["committed"]
    assert committed["offset"] == committed["polledEnd"] != "-1", results


def test_transactions_commit_rollback_and_check_back(rmq, classes):
    """Committed messages arrive, rolled-back ones never; UNKNOW is decided by check-back."""
    results = _run(rmq, classes, "tx", "TxTopic")
    states = {r["body"]: r["state"] for r in results if r["op"] == "sent"}
    assert states == {"commit-0": "COMMIT_MESSAGE", "commit-1": "COMMIT_MESSAGE",
                      "rollback-0": "ROLLBACK_MESSAGE", "rollback-1": "ROLLBACK_MESSAGE",
                      "unknown-commit": "UNKNOW", "unknown-rollback": "UNKNOW"}, results
    (outcome,) = [r for r in results if r["op"] == "tx"]
    assert outcome["received"] == "commit-0,commit-1,unknown-commit", results
    assert set(outcome["checked"].split(",")) >= {"unknown-commit", "unknown-rollback"}
    assert not set(outcome["checked"].split(",")) & {"commit-0", "rollback-0"}, results


def test_ordered_with_selector_and_tag_filter(rmq, classes):
    """60 messages over 4 order keys and tags A/B/C; "A || B" gets 40, in send order per key."""
    results = [r for r in _run(rmq, classes, "ordered", "OrderedTopic") if r["op"] == "ordered"]
    got = {r["keyTag"]: [int(n) for n in r["numbers"].strip("[]").split(",")] for r in results}
    expected: dict[str, list[int]] = {}
    for number in range(60):
        tag = "ABC"[number % 3]
        if tag != "C":
            expected.setdefault(f"key{number % 4}/{tag}", []).append(number)
    assert got == expected
