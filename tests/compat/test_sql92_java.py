# Compat: SQL92 on pybroker and on the Java 4.9.8 broker, with Java, Go and Python clients.
"""Goal: an SQL92 selector delivers the same messages from pybroker as from the Java broker,
whichever client pulls (the official Java client, the Go client, pybroker's Python client);
a selector the Java broker refuses is refused by pybroker with the same code and remark; Java
and Python push consumers with an SQL92 subscription get only matching messages
(heartbeat-registered selector, long-poll wake-ups) and cannot start with a bad one.

Method: both brokers run with enablePropertyFilter=true; the table of tests/sql92_cases.py (8
messages with chosen properties, ~70 selectors) is sent once per broker with the Python
producer, and every selector's matches are pulled from offset 0 by each client:
tools/java_compat/SqlTable.java (DefaultMQPullConsumer + MessageSelector.bySql), rmqgo
sqltable (PullConsumer with an SQL92 MessageSelector), and pybroker.client's pull with
MessageSelector.by_sql. The Java client on the Java broker is the reference. Bad selectors
go to both brokers as raw CHECK_CLIENT_CONFIG requests. Missing peers skip (fail under
PYBROKER_REQUIRE_PEERS=1).
"""
import asyncio
import contextlib
import json
import pathlib
import subprocess
import uuid

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.client import (ClientInstance, ConsumeStatus, Message, MessageSelector, Producer,
                             PushConsumer)
from pybroker.client.errors import SubscriptionError
from pybroker.client.pulling import pull_message
from pybroker.client.route import subscribe_queues
from pybroker.client.selector import subscription_of
from pybroker.protocol import bodies
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.constants import ConsumeFromWhere
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient
from tests import peers, sql92_cases

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tools" / "java_compat" / "SqlTable.java"
TABLE_TOPIC = "SqlTableTopic"


@pytest.fixture(scope="module")
def install():
    return peers.java_install("4.9.8")


@pytest.fixture(scope="module")
def classes(install):
    return peers.compiled_java(install, SOURCE)


@pytest.fixture(scope="module")
def brokers(install, tmp_path_factory):
    """{"java": (namesrv, broker address, harness), "pybroker": (...)} with the table sent."""
    with contextlib.ExitStack() as stack:
        java = stack.enter_context(peers.java_broker(tmp_path_factory.mktemp("java-sql"),
                                                     install))
        ours = stack.enter_context(StandaloneBroker(tmp_path_factory.mktemp("pybroker-sql"),
                                                    {"enablePropertyFilter": "true"}))
        client = peers.java_rocketmq.JavaRocketMQ(tmp_path_factory.mktemp("java-client"),
                                                  install, namesrv_port=ours.namesrv_port)
        client.write_files()
        found = {"java": (java.namesrv_addr, java.broker_addr, java),
                 "pybroker": (ours.namesrv_addr, ours.broker_addr, client)}
        for namesrv, _, _ in found.values():
            asyncio.run(_send_table(namesrv, TABLE_TOPIC))
        yield found


async def _send_table(namesrv: str, topic: str) -> None:
    async with Producer(f"sql_table_{uuid.uuid4().hex[:8]}", namesrv) as producer:
        for index, properties in enumerate(sql92_cases.TABLE_MESSAGES):
            user = {name: value for name, value in properties.items() if name != "TAGS"}
            message = Message(topic, f"m{index}", tags=properties.get("TAGS"),
                              properties=user)
            result = await producer.send(message)
            assert result.status.name == "SEND_OK", result


def _selectors_file(tmp_path) -> pathlib.Path:
    path = tmp_path / "selectors.jsonl"
    path.write_text("".join(json.dumps(expression) + "\n"
                            for expression in sql92_cases.TABLE_EXPRESSIONS))
    return path


def _java_matches(harness, classes, namesrv, selectors) -> list[list[str]]:
    run = harness.run_class("SqlTable", ["pull", namesrv, f"topic={TABLE_TOPIC}",
                                         f"group=sql_java_{uuid.uuid4().hex[:8]}",
                                         f"exprs={selectors}"],
                            timeout_s=300, extra_classpath=[classes])
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    rows = [peers.parse_result_line(line) for line in run.stdout.splitlines()
            if line.startswith("RESULT op=sqlmatch")]
    assert all(not row["error"] for row in rows), [row for row in rows if row["error"]][:3]
    return [sorted(filter(None, row["bodies"].split(","))) for row in rows]


def _go_matches(namesrv, selectors) -> list[list[str]]:
    rmqgo = peers.rmqgo_path()
    run = subprocess.run([str(rmqgo), "sqltable", "--namesrv", namesrv, "--topic", TABLE_TOPIC,
                          "--group", f"sql_go_{uuid.uuid4().hex[:8]}", "--exprs-file",
                          str(selectors), "--timeout", "240s"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in run.stdout.splitlines() if '"sqlmatch"' in line]
    assert all(not row["error"] for row in rows), [row for row in rows if row["error"]][:3]
    return [sorted(row["bodies"]) for row in rows]


async def _python_matches(namesrv: str) -> list[list[str]]:
    instance = ClientInstance(namesrv, instance_name=f"sql-{uuid.uuid4().hex[:6]}")
    await instance.start()
    try:
        route = await instance.update_route(TABLE_TOPIC)
        queues = subscribe_queues(TABLE_TOPIC, route)
        group = f"sql_py_{uuid.uuid4().hex[:8]}"
        matches = []
        for expression in sql92_cases.TABLE_EXPRESSIONS:
            subscription = subscription_of(TABLE_TOPIC, MessageSelector.by_sql(expression), 1)
            found = []
            for queue in queues:
                offset = 0
                while True:
                    pulled = await pull_message(instance, group, queue, offset, subscription,
                                                suspend_timeout_ms=0, post_subscription=True)
                    found += [bytes(message.body).decode() for message in pulled.messages]
                    if pulled.next_begin_offset <= offset or \
                            pulled.next_begin_offset >= pulled.max_offset:
                        break
                    offset = pulled.next_begin_offset
            matches.append(sorted(found))
        return matches
    finally:
        await instance.shutdown()


def test_table_matches_alike_on_both_brokers_with_three_clients(brokers, classes, tmp_path):
    selectors = _selectors_file(tmp_path)
    java_namesrv, _, java = brokers["java"]
    reference = _java_matches(java, classes, java_namesrv, selectors)
    assert len(reference) == len(sql92_cases.TABLE_EXPRESSIONS)
    all_bodies = [f"m{index}" for index in range(len(sql92_cases.TABLE_MESSAGES))]
    assert any(0 < len(found) < len(all_bodies) for found in reference)
    results = {}
    for broker, (namesrv, _, harness) in brokers.items():
        results[(broker, "python")] = asyncio.run(_python_matches(namesrv))
        results[(broker, "go")] = _go_matches(namesrv, selectors)
        if broker != "java":
            results[(broker, "java")] = _java_matches(harness, classes, namesrv, selectors)
    for (broker, client), found in results.items():
        differences = [(expression, expected, got) for expression, expected, got in
                       zip(sql92_cases.TABLE_EXPRESSIONS, reference, found, strict=True)
                       if expected != got]
        assert differences == [], (broker, client, differences[:5])


def _check_client_config(address: str, expression: str) -> tuple[int, str | None]:
    subscription = bodies.SubscriptionData(topic=TABLE_TOPIC, sub_string=expression,
                                           expression_type="SQL92", sub_version=1)
    body = bodies.encode_check_client_request(
        bodies.CheckClientRequest("127.0.0.1@check", "sql_check", subscription))
    with SyncRemotingClient() as client:
        client.connect(address)
        response = client.invoke(create_request(RequestCode.CHECK_CLIENT_CONFIG, None, body),
                                 10_000)
    return response.code, response.remark


def test_bad_selectors_refused_alike(brokers):
    _, java_address, _ = brokers["java"]
    _, our_address, _ = brokers["pybroker"]
    for expression in sql92_cases.TABLE_BAD_EXPRESSIONS + ("a > 5", "TAGS IN ('x')"):
        java = _check_client_config(java_address, expression)
        assert _check_client_config(our_address, expression) == java, expression
    assert _check_client_config(our_address, "a >")[0] == ResponseCode.SUBSCRIPTION_PARSE_FAILED


@contextlib.contextmanager
def _java_push(harness, classes, namesrv: str, topic: str, expression: str, count: int):
    """A Java push consumer with bySql(expression) running while the block runs; yields the
    list the received bodies are put in once it stopped (after ``count`` and 3 quiet s)."""
    argv = harness.client_argv("SqlTable", ["push", namesrv, f"topic={topic}",
                                            f"group=sql_push_{uuid.uuid4().hex[:8]}",
                                            f"expr={expression}", f"count={count}",
                                            "timeout=90"], extra_classpath=[classes])
    bodies: list[str] = []
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=harness.work_dir)
    try:
        started = process.stdout.readline()
        assert "op=started" in started, started + process.stderr.read()[-3000:]
        yield bodies
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stdout[-3000:] + stderr[-3000:]
    bodies += [peers.parse_result_line(line)["body"] for line in stdout.splitlines()
               if line.startswith("RESULT op=received")]


def test_java_push_consumer_gets_only_matches(brokers, classes):
    # "a > 4 AND a < 11" takes m1 (5), m2 (10) and m7 (+5); m3 and m4 make Java's evaluation
    # throw ("abc", 3000000000 is no Integer), which drops them.
    received = {}
    for broker, (namesrv, _, harness) in brokers.items():
        topic = f"SqlPush_{uuid.uuid4().hex[:8]}"
        asyncio.run(_send_table(namesrv, topic))     # before the consumer: read from offset 0
        with _java_push(harness, classes, namesrv, topic, "a > 4 AND a < 11", 6) as bodies:
            asyncio.run(_send_table(namesrv, topic))  # while its pulls are held
        received[broker] = sorted(bodies)
    assert received["java"] == ["m1", "m1", "m2", "m2", "m7", "m7"]
    assert received["pybroker"] == received["java"]


def test_java_consumer_cannot_start_with_a_bad_selector(brokers, classes):
    errors = {}
    for broker, (namesrv, _, harness) in brokers.items():
        run = harness.run_class("SqlTable", ["start", namesrv, f"topic={TABLE_TOPIC}",
                                             f"group=sql_start_{uuid.uuid4().hex[:8]}",
                                             "expr=a >"],
                                timeout_s=120, extra_classpath=[classes])
        [row] = [peers.parse_result_line(line) for line in run.stdout.splitlines()
                 if line.startswith("RESULT op=start")]
        assert row["ok"] == "false", row
        errors[broker] = row["error"]
    assert "CODE: 23" in errors["pybroker"] and "Encountered" in errors["pybroker"]
    # The client's message names the broker address; the remark itself is the same.
    assert errors["pybroker"].split("DESC:")[1].split("For more")[0].strip() == \
        errors["java"].split("DESC:")[1].split("For more")[0].strip()


async def _python_push(namesrv: str, topic: str, expression: str, count: int) -> list[str]:
    """Bodies a Python push consumer with by_sql(expression) receives: the table sent before
    it starts and once more while it runs, until ``count`` arrived and 3 s passed."""
    bodies: list[str] = []
    consumer = PushConsumer(f"sql_pypush_{uuid.uuid4().hex[:8]}", namesrv,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic, MessageSelector.by_sql(expression))

    async def listener(messages, context):
        bodies.extend(bytes(message.body).decode() for message in messages)
        return ConsumeStatus.CONSUME_SUCCESS
    consumer.register_message_listener(listener)
    await consumer.start()
    try:
        await _send_table(namesrv, topic)
        deadline = asyncio.get_running_loop().time() + 60
        while len(bodies) < count and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(3)         # duplicates or unmatched messages would show up here
    finally:
        await consumer.shutdown()
    return sorted(bodies)


def test_python_push_consumer_gets_only_matches(brokers):
    received = {}
    for broker, (namesrv, _, _) in brokers.items():
        topic = f"SqlPyPush_{uuid.uuid4().hex[:8]}"
        asyncio.run(_send_table(namesrv, topic))
        received[broker] = asyncio.run(_python_push(namesrv, topic, "a > 4 AND a < 11", 6))
    assert received["java"] == ["m1", "m1", "m2", "m2", "m7", "m7"]
    assert received["pybroker"] == received["java"]


def test_python_consumer_cannot_start_with_a_bad_selector(brokers):
    for namesrv, _, _ in brokers.values():
        consumer = PushConsumer(f"sql_pybad_{uuid.uuid4().hex[:8]}", namesrv)
        consumer.subscribe(TABLE_TOPIC, MessageSelector.by_sql("a >"))
        consumer.register_message_listener(lambda messages, context: None)
        with pytest.raises(SubscriptionError, match="Encountered"):
            asyncio.run(consumer.start())
