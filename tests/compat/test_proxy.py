# Compat: what Apache's rocketmq-proxy 5.3.3 in CLUSTER mode asks of NameServer and broker.
"""Goal: Apache's rocketmq-proxy 5.3.3 (CLUSTER mode, from Maven Central) in front of pybroker
gives the official RocketMQ 5 SDKs the results it gives them in front of the Java 5.3.3 broker
(and pybroker's own gRPC endpoint gives them the same results with no proxy),
and the remoting requests it sends NameServer and broker for them are answered alike.

Method: the same proxy (tools/rocketmq_proxy.py, small heap, free ports) starts once per module
in front of pybroker standalone and once in front of Java 5.3.3's NameServer and broker;
tools/capture_proxy.py relays between the proxy and each of them record every frame. The same
assertions hold on both.

- At start and idle: the proxy asks the route of its system topic DefaultHeartBeatSyncerTopic
  (TOPIC_NOT_EXIST), creates it on the broker (UPDATE_AND_CREATE_TOPIC), registers its
  broadcasting system consumer and producer (HEART_BEAT, answered with the 5.x heartbeat
  fields), reads the queue's max offset and long-polls it: the pulls are held, never answered at
  once (SUBSCRIPTION_NOT_LATEST was pybroker's answer before broadcasting groups stopped being
  notified), and no NOTIFY_CONSUMER_IDS_CHANGED reaches the proxy.
- The SDKs' producers (rocketmq-python-client 5.1.2, rocketmq-client-java 5.0.8,
  rocketmq-clients golang/v5 5.1.2: tools/proxy_sdk/ and tests/compat/gosdk), run at once on
  topics of each 5.x message type: normal sends (tag, keys, properties), FIFO sends in two
  message groups, a delay message, transactions (committed, rolled back, decided by the
  server's check-back through the proxy), a recall (Python and Java: the Go SDK has none), and
  a normal message to a FIFO topic. What
  was stored is read back with raw pulls; the capture shows the requests behind them
  (GET_TOPIC_CONFIG, SEND_MESSAGE_V2, the transaction heartbeat and cluster-name route,
  END_TRANSACTION, CHECK_TRANSACTION_STATE).

- The SDKs' consumers: SimpleConsumer (Python, Java, Go) receives, acks, changes an invisible
  duration (the message comes back, attempt 2) and leaves a message of a group that retries
  once unacked until the proxy forwards it to the DLQ; PushConsumer (Python, Java) with a
  listener that fails once, and one that always fails (to the DLQ); the Python PushConsumer
  holding a message past its invisible time (auto-renew). The capture shows the
  requests behind them (GET_SUBSCRIPTIONGROUP_CONFIG, POP_MESSAGE, ACK_MESSAGE,
  CHANGE_MESSAGE_INVISIBLETIME, CONSUMER_SEND_MSG_BACK).

The same SDK programs and assertions run a third time with no proxy at all, against
pybroker's own gRPC endpoint (backend ``native``, issue #26: one gRPC worker, TLS and plain
on its port, the proxy's long-polling settings): the results must be those of the proxy
route. The checks of what the proxy exchanged with the broker have nothing to look at there
and skip.

Every scenario is expected to pass on all three.
Missing Java, Go or the SDKs skips (fails under PYBROKER_REQUIRE_PEERS=1).
"""
import json
import time

import pytest

from pybroker.protocol.codes import RequestCode, ResponseCode
from tests import peers, proxy_support
from tests.ha_support import wait_for

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(300)]

SYNCER_TOPIC = "DefaultHeartBeatSyncerTopic"
SYNCER_GROUP = "CID_DefaultHeartBeatSyncerTopic"


@pytest.fixture(scope="module", params=proxy_support.BACKENDS)
def deployment(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"proxy-{request.param}")
    with proxy_support.deployment(request.param, work, peers) as running:
        yield running


def _idle_exchanges(deployment) -> list:
    """The broker capture once the system consumer has pulled and a second has passed."""
    wait_for(lambda: proxy_support.of_code(deployment.broker_exchanges(),
                                           RequestCode.PULL_MESSAGE),
             60, "the proxy's first pull of its system topic")
    time.sleep(1.0)
    return deployment.broker_exchanges()


def _sub_versions(heartbeat) -> list[int]:
    body = json.loads(bytes(heartbeat.request.body))
    return [subscription["subVersion"] for consumer in body["consumerDataSet"]
            for subscription in consumer["subscriptionDataSet"]]


def _newest_version(heartbeats, when, before: float) -> int:
    """The newest subscription version among the heartbeats whose ``when`` precedes
    ``before`` (-1 when none does)."""
    return max((version for heartbeat in heartbeats
                if when(heartbeat) is not None and when(heartbeat) < before
                for version in _sub_versions(heartbeat)), default=-1)


def test_start_creates_the_system_topic(deployment):
    proxy_support.needs_proxy(deployment)
    routes = proxy_support.of_code(deployment.namesrv_exchanges(),
                                   RequestCode.GET_ROUTEINFO_BY_TOPIC)
    syncer = [e for e in routes if e.request.ext_fields.get("topic") == SYNCER_TOPIC]
    assert [e.response.code for e in syncer[:2]] == [ResponseCode.TOPIC_NOT_EXIST,
                                                    ResponseCode.SUCCESS], deployment.backend
    (create,) = proxy_support.of_code(deployment.broker_exchanges(),
                                      RequestCode.UPDATE_AND_CREATE_TOPIC)
    fields = create.request.ext_fields
    assert (fields["topic"], fields["readQueueNums"], fields["writeQueueNums"],
            fields["perm"]) == (SYNCER_TOPIC, "1", "1", "6")
    assert create.response.code == ResponseCode.SUCCESS
    assert b'"perm":6' in syncer[1].response.body and b'"readQueueNums":1' in \
        syncer[1].response.body


def test_system_consumer_registers_and_long_polls(deployment):
    proxy_support.needs_proxy(deployment)
    found = _idle_exchanges(deployment)
    heartbeats = proxy_support.of_code(found, RequestCode.HEART_BEAT)
    assert heartbeats and all(e.response.code == ResponseCode.SUCCESS for e in heartbeats)
    assert {key: heartbeats[0].response.ext_fields[key] for key in
            ("IS_SUPPORT_HEART_BEAT_V2", "IS_SUB_CHANGE")} == \
        {"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "true"}
    assert b'"messageModel":"BROADCASTING"' in heartbeats[0].request.body
    (max_offset,) = proxy_support.of_code(found, RequestCode.GET_MAX_OFFSET)
    assert (max_offset.request.ext_fields["topic"], max_offset.response.code,
            max_offset.response.ext_fields["offset"]) == (SYNCER_TOPIC, ResponseCode.SUCCESS,
                                                          "0")
    pulls = proxy_support.of_code(found, RequestCode.PULL_MESSAGE)
    assert {e.request.ext_fields["consumerGroup"] for e in pulls} == {SYNCER_GROUP}
    for pull in pulls:
        # Java's rule: a pull whose subscription version is newer than the one the group's
        # heartbeat registered is answered SUBSCRIPTION_NOT_LATEST (the consumer bumps the
        # version when it re-balances and may send it in a pull before a heartbeat carries
        # it: its heartbeat after a re-balance is skipped when another one is running); any
        # other pull is held (the long poll is open, or ended with no message). A heartbeat
        # sent before the pull but answered after it may have been registered first or not
        # (the proxy does not wait for its answer): either answer is right for such a pull.
        registered = _newest_version(heartbeats, lambda hb: hb.answered_at, pull.time)
        sent = _newest_version(heartbeats, lambda hb: hb.time, pull.time)
        answer = None if pull.response is None else pull.response.code
        version = int(pull.request.ext_fields["subVersion"])
        if version <= registered:
            assert answer in (None, ResponseCode.PULL_NOT_FOUND), pull.response
        elif version > sent:
            assert answer == ResponseCode.SUBSCRIPTION_NOT_LATEST, pull.response
        else:
            assert answer in (None, ResponseCode.PULL_NOT_FOUND,
                              ResponseCode.SUBSCRIPTION_NOT_LATEST), pull.response
    assert not proxy_support.of_code(found, RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                     from_proxy=False)


# --- the SDKs' producers through the proxy -------------------------------------------------------

TYPES = {"normal": "NORMAL", "fifo": "FIFO", "delay": "DELAY", "tx": "TRANSACTION"}
PREFIX = {"python": "Py", "java": "Java", "go": "Go"}
KINDS = {sdk: ("normal", "fifo", "delay", "tx") for sdk in ("python", "java", "go")}
TX_SDKS = ("python", "java", "go")
RECALL_SDKS = ("python", "java")   # the Go SDK 5.1.2 has no RecallMessage


def topic_of(sdk: str, kind: str) -> str:
    return f"{PREFIX[sdk]}{kind.capitalize()}"


def _ops(sdk: str) -> list[str]:
    topics = [f"{kind}={topic_of(sdk, kind)}" for kind in KINDS[sdk]]
    ops = ["produce", *topics, f"run={sdk}", "delay_s=3", "tx_wait_s=60"]
    if sdk in RECALL_SDKS:
        ops += ["then", "recall", f"delay={topic_of(sdk, 'delay')}", f"run={sdk}", "delay_s=3"]
    return ops


@pytest.fixture(scope="module")
def produced(deployment):
    """Every SDK's producer scenarios, run once per broker, at once (topics created first: the
    proxy caches a missing route for 20 s)."""
    for sdk, kinds in KINDS.items():
        for kind in kinds:
            proxy_support.create_topic(deployment.broker_addr, topic_of(sdk, kind), TYPES[kind])
    runs = {sdk: _ops(sdk) for sdk in proxy_support.SDKS}
    return proxy_support.run_sdks(runs, deployment.endpoint, peers)


def _ok(results: list[dict], op: str, count: int) -> list[dict]:
    found = proxy_support.results_of(results, op)
    assert [entry["status"] for entry in found] == ["ok"] * count, found
    return found


@pytest.mark.parametrize("sdk", proxy_support.SDKS)
def test_sdk_normal_send(deployment, produced, sdk):
    proxy_support.exited(produced[sdk])
    sent = _ok(produced[sdk], "normal", 3)
    stored = proxy_support.wait_stored(deployment.broker_addr, topic_of(sdk, "normal"), 3, 30)
    by_body = {bytes(record.body).decode(): record for record in stored}
    assert sorted(by_body) == [f"{sdk}-normal-{i}" for i in range(3)]
    for entry in sent:
        index = int(entry["index"])
        properties = proxy_support.stored_properties(by_body[f"{sdk}-normal-{index}"])
        assert (properties["TAGS"], properties["KEYS"], properties["color"],
                properties["index"], properties["UNIQ_KEY"]) == (
            "TagA", f"{sdk}-key-{index}", "blue", str(index), entry["msg_id"])


@pytest.mark.parametrize("sdk", proxy_support.SDKS)
def test_sdk_fifo_send_keeps_each_group_in_one_queue(deployment, produced, sdk):
    proxy_support.exited(produced[sdk])
    _ok(produced[sdk], "fifo", 4)
    stored = proxy_support.wait_stored(deployment.broker_addr, topic_of(sdk, "fifo"), 4, 30)
    groups: dict[str, list] = {}
    for record in stored:
        groups.setdefault(proxy_support.stored_properties(record)["__SHARDINGKEY"],
                          []).append(record)
    assert sorted(groups) == ["group-0", "group-1"]
    for records in groups.values():
        assert len({record.queue_id for record in records}) == 1
        in_queue_order = sorted(records, key=lambda record: record.queue_offset)
        indexes = [int(bytes(record.body).decode().rsplit("-", 1)[1]) for record in in_queue_order]
        assert indexes == sorted(indexes)


@pytest.mark.parametrize("sdk", proxy_support.SDKS)
def test_sdk_delay_send_arrives_at_its_time(deployment, produced, sdk):
    proxy_support.exited(produced[sdk])
    (sent,) = _ok(produced[sdk], "delay", 1)
    deliver_ms = int(sent["deliver_s"]) * 1000
    stored = proxy_support.wait_stored(deployment.broker_addr, topic_of(sdk, "delay"), 1, 30)
    (delayed,) = [r for r in stored if bytes(r.body) == f"{sdk}-delay".encode()]
    assert proxy_support.stored_properties(delayed)["TIMER_DELIVER_MS"] == str(deliver_ms)
    # Stored in its topic once due (the timer's precision is a second).
    assert delayed.store_timestamp >= deliver_ms - 1000, (delayed.store_timestamp, deliver_ms)


MISMATCH = {
    "python": ("IllegalArgumentException: current message type not match with queue accept "
               "message types, topic:PyFifo, message_type:NORMAL, queue access type:FIFO"),
    "java": ("IllegalArgumentException: Current message type not match with topic accept "
             "message types, topic=JavaFifo, actualMessageType=NORMAL, acceptMessageTypes=[FIFO]"),
    "go": "current message type not match with topic accept message types",
}


@pytest.mark.parametrize("sdk", proxy_support.SDKS)
def test_sdk_sees_the_topic_type(produced, sdk):
    """A normal message to a FIFO topic: the SDK refuses it from the accept types the proxy's
    route carries (read from the broker with GET_TOPIC_CONFIG; the Go SDK's words name no
    type)."""
    proxy_support.exited(produced[sdk])
    (refused,) = proxy_support.results_of(produced[sdk], "mismatch")
    assert (refused["status"], refused["error"]) == ("error", MISMATCH[sdk])
    if sdk == "python":
        (proxy_check,) = proxy_support.results_of(produced[sdk], "mismatch-proxy")
        assert proxy_check["error"] == (
            "BadRequestException: 40014, org.apache.rocketmq.proxy.common.ProxyException: "
            "TopicMessageType validate failed, the expected type is FIFO, but actual type is "
            "NORMAL")


@pytest.mark.parametrize("sdk", TX_SDKS)
def test_sdk_transactions(deployment, produced, sdk):
    proxy_support.exited(produced[sdk])
    sent = _ok(produced[sdk], "tx-send", 3)
    assert [entry["decision"] for entry in proxy_support.results_of(produced[sdk], "tx-end")] \
        == ["commit", "rollback", "check"]
    assert proxy_support.results_of(produced[sdk], "tx-checked") == [
        {"op": "tx-checked", "asked": "true"}]
    checked = {entry["msg_id"] for entry in proxy_support.results_of(produced[sdk], "tx-check")
               if entry["decision"] == "check"}
    assert checked == {entry["msg_id"] for entry in sent if entry["decision"] == "check"}
    stored = proxy_support.wait_stored(deployment.broker_addr, topic_of(sdk, "tx"), 2, 30)
    bodies = sorted(bytes(record.body).decode() for record in stored)
    if deployment.backend == "java":
        # Java 5.3.3 writes the op records of ended transactions in batches (every 3 s) and
        # may check a transaction the client already committed, or check one again before
        # the op record of the checker's commit is written; each check the checker answers
        # COMMIT stores the message again (the Go harness, whose SDK ends a checked
        # transaction after its Check returns, waits 3 s before stopping: Java checks the
        # third message several times meanwhile). pybroker writes the op record at once.
        bodies = sorted(set(bodies))
    assert bodies == [f"{sdk}-tx-check", f"{sdk}-tx-commit"]


@pytest.mark.parametrize("sdk", RECALL_SDKS)
def test_sdk_recall(deployment, produced, sdk):
    proxy_support.exited(produced[sdk])
    _ok(produced[sdk], "recall-kept", 1)
    _ok(produced[sdk], "recall-send", 1)
    (recall,) = proxy_support.results_of(produced[sdk], "recall")
    assert recall["status"] == "ok", recall
    topic = topic_of(sdk, "delay")

    def kept_arrived():
        return [r for r in proxy_support.stored(deployment.broker_addr, topic)
                if bytes(r.body) == f"{sdk}-kept".encode()]
    wait_for(kept_arrived, 30, "the kept delay message")
    bodies = {bytes(r.body) for r in proxy_support.stored(deployment.broker_addr, topic)}
    assert f"{sdk}-recalled".encode() not in bodies


def test_proxy_requests_behind_the_sends(deployment, produced):
    """The remoting requests behind the SDKs' sends, answered alike: GET_TOPIC_CONFIG (351)
    with the topic's message.type, SEND_MESSAGE_V2 (310) whose half-message answers carry
    transactionId, the proxy's oneway transaction heartbeat for the transactional topics' groups
    after it routed the cluster-name topic, END_TRANSACTION (37) for the client's commit and
    rollback and for the check-back's commit, and CHECK_TRANSACTION_STATE (39) to the proxy."""
    proxy_support.needs_proxy(deployment)
    found = deployment.broker_exchanges()
    configs = {e.request.ext_fields["topic"]: e for e in
               proxy_support.of_code(found, RequestCode.GET_TOPIC_CONFIG)}
    for sdk, kinds in KINDS.items():
        for kind in kinds:
            exchange = configs[topic_of(sdk, kind)]
            assert exchange.response.code == ResponseCode.SUCCESS
            assert f'"message.type":"{TYPES[kind]}"'.encode() in exchange.response.body
    sends = proxy_support.of_code(found, RequestCode.SEND_MESSAGE_V2)
    assert sends and {e.response.code for e in sends} == {ResponseCode.SUCCESS}
    halves = [e for e in sends if "TRAN_MSG\x01true" in e.request.ext_fields["i"]]
    assert len(halves) == 3 * len(TX_SDKS)
    for half in halves:
        uniq = proxy_support.props.decode_properties(half.request.ext_fields["i"])["UNIQ_KEY"]
        assert half.response.ext_fields["transactionId"] == uniq
    tx_heartbeats = [e for e in proxy_support.of_code(found, RequestCode.HEART_BEAT)
                     if b'"clientID":"rmq-proxy-producer-client"' in e.request.body]
    assert tx_heartbeats and all(e.request.is_oneway for e in tx_heartbeats)
    registered = {producer["groupName"] for e in tx_heartbeats
                  for producer in json.loads(bytes(e.request.body))["producerDataSet"]}
    assert registered == {topic_of(sdk, "tx") for sdk in TX_SDKS}
    cluster_routes = [e for e in proxy_support.of_code(deployment.namesrv_exchanges(),
                                                       RequestCode.GET_ROUTEINFO_BY_TOPIC)
                      if e.request.ext_fields["topic"] == "DefaultCluster"]
    assert cluster_routes and cluster_routes[0].response.code == ResponseCode.SUCCESS
    ends = proxy_support.of_code(found, RequestCode.END_TRANSACTION)
    assert all(e.request.is_oneway for e in ends)
    decided = {(e.request.ext_fields["producerGroup"], e.request.ext_fields["commitOrRollback"],
                e.request.ext_fields["fromTransactionCheck"]) for e in ends}
    for sdk in TX_SDKS:
        group = topic_of(sdk, "tx")
        # The Go SDK 5.1.2 sets no source in its EndTransaction, so the proxy marks its
        # checker's commit as the client's own (fromTransactionCheck false).
        checked = "false" if sdk == "go" else "true"
        assert {(group, "8", "false"), (group, "12", "false"), (group, "8", checked)} <= decided
    checks = proxy_support.of_code(found, RequestCode.CHECK_TRANSACTION_STATE, from_proxy=False)
    assert checks and all(e.request.is_oneway for e in checks)
    assert {(e.request.ext_fields["topic"], e.request.ext_fields["bname"]) for e in checks} == \
        {("RMQ_SYS_TRANS_HALF_TOPIC", "broker-a")}


# --- the SDKs' consumers through the proxy -------------------------------------------------------

CONSUMER_OPS = {"python": ("simple", "push"), "java": ("simple", "push"), "go": ("simple",)}
# Ops with no DLQ part, run after an SDK's CONSUMER_OPS: the auto-renew scenario.
RENEW_OPS = {"python": ("pushslow",)}
# RocketMQ 5.x's POP codes (pybroker's RequestCode gets them with branch pop).
POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME = 200050, 200051, 200053
PUSH_SDKS = ("python", "java")


def consumer_names(sdk: str, op: str) -> dict[str, str]:
    """Topic and group of an op, and of its DLQ part (a group that retries once)."""
    base = f"{PREFIX[sdk]}{op.capitalize()}"
    return {"topic": base, "group": f"{base}Group", "dlq_topic": f"{base}Dlq",
            "dlq_group": f"{base}DlqGroup"}


@pytest.fixture(scope="module")
def consumed(deployment, produced):
    """Every SDK's SimpleConsumer (and PushConsumer) scenarios, once per broker, at once."""
    runs = {}
    for sdk, ops in CONSUMER_OPS.items():
        words: list[str] = []
        for op in ops:
            names = consumer_names(sdk, op)
            for topic in (names["topic"], names["dlq_topic"]):
                proxy_support.create_topic(deployment.broker_addr, topic, "NORMAL")
            fast = 1000 if op == "push" else None
            proxy_support.create_group(deployment.broker_addr, names["group"],
                                       retry_every_ms=fast)
            proxy_support.create_group(deployment.broker_addr, names["dlq_group"],
                                       retry_max_times=1, retry_every_ms=fast)
            words += [*(["then"] if words else []), op, *(f"{k}={v}" for k, v in names.items()),
                      f"run={sdk}"]
        for op in RENEW_OPS.get(sdk, ()):
            names = consumer_names(sdk, op)
            proxy_support.create_topic(deployment.broker_addr, names["topic"], "NORMAL")
            proxy_support.create_group(deployment.broker_addr, names["group"])
            words += ["then", op, f"topic={names['topic']}", f"group={names['group']}",
                      f"run={sdk}"]
        runs[sdk] = words
    return proxy_support.run_sdks(runs, deployment.endpoint, peers, timeout_s=240)


def _dlq_bodies(deployment, group: str) -> list[tuple[bytes, int]]:
    return [(bytes(r.body), r.reconsume_times)
            for r in proxy_support.stored(deployment.broker_addr, f"%DLQ%{group}", 1)]


@pytest.mark.parametrize("sdk", proxy_support.SDKS)
def test_sdk_simple_consumer(deployment, consumed, sdk):
    """Receive, ack, change invisible duration (the message comes back, attempt 2), and a
    message never acked goes to the DLQ after the group's retryMaxTimes + 1 deliveries."""
    proxy_support.exited(consumed[sdk])
    received = [(e["body"], e["attempt"]) for e in
                proxy_support.results_of(consumed[sdk], "simple-received")]
    assert sorted(received) == sorted([(f"{sdk}-simple-0", "1"), (f"{sdk}-simple-1", "1"),
                                       (f"{sdk}-simple-1", "2"), (f"{sdk}-simple-2", "1")])
    assert [e["body"] for e in proxy_support.results_of(consumed[sdk], "simple-invisible")] == \
        [f"{sdk}-simple-1"]
    assert sorted(e["body"] for e in proxy_support.results_of(consumed[sdk], "simple-ack")) == \
        [f"{sdk}-simple-{i}" for i in range(3)]
    dlq_attempts = [e["attempt"] for e in proxy_support.results_of(consumed[sdk], "dlq-received")]
    assert dlq_attempts == ["1", "2"]
    names = consumer_names(sdk, "simple")
    assert _dlq_bodies(deployment, names["dlq_group"]) == [(f"{sdk}-dlq".encode(), 3)]


def test_sdk_push_renewal(deployment, consumed):
    """The Python SDK's PushConsumer holds a message 16 s, longer than the 12 s it is invisible
    for (defaultInvisibleTimeMills), and its receive asks for auto-renew. pybroker's own
    endpoint renews it while the client works (grpc_service/renewal.py, the proxy's rules), so
    each message is delivered once. rocketmq-proxy 5.3.3 never starts its renewal service
    (apache/rocketmq #7837, fixed after 5.3.3): behind it the held message becomes visible
    again and may be delivered a second time, whichever broker is behind (when depends on the
    broker's revive; the bounds are checked). Neither message comes back after its ack."""
    proxy_support.exited(consumed["python"])
    events = proxy_support.results_of(consumed["python"], "pushslow-received")
    deliveries = sorted((e["body"], e["attempt"]) for e in events)
    once = [("python-pushslow-0", "1"), ("python-pushslow-1", "1")]
    if deployment.proxy is None:
        assert deliveries == once, (deployment.backend, events)
    else:
        # Behind the proxy the held message comes back once its invisible time has passed and
        # the broker's revive has put it again: when, depends on the broker's timer and revive
        # on a loaded box (a CI run saw it come after the consumer had stopped), so only its
        # bounds are checked here; the second delivery itself was seen on a quiet box.
        assert set(once) <= set(deliveries) <= set(once + [("python-pushslow-0", "2")]), \
            (deployment.backend, events)
    held = [float(e["held_s"]) for e in events if e["body"] == "python-pushslow-0"]
    assert held and min(held) >= 16, events


@pytest.mark.parametrize("sdk", PUSH_SDKS)
def test_sdk_push_consumer(deployment, consumed, sdk):
    """A listener that fails once gets the message again (attempt 2); one that always fails
    sends the message to the DLQ after two deliveries (the groups retry after 1 s: the 5.x
    retry policy EXPONENTIAL, read by the proxy with GET_SUBSCRIPTIONGROUP_CONFIG)."""
    proxy_support.exited(consumed[sdk])
    outcomes = sorted((e["body"], e["attempt"], e["outcome"]) for e in
                      proxy_support.results_of(consumed[sdk], "push-received"))
    assert outcomes == sorted([
        (f"{sdk}-push-0", "1", "success"), (f"{sdk}-push-1", "1", "failure"),
        (f"{sdk}-push-1", "2", "success"), (f"{sdk}-push-2", "1", "success"),
        (f"{sdk}-push-dlq", "1", "failure"), (f"{sdk}-push-dlq", "2", "failure")])
    names = consumer_names(sdk, "push")
    assert _dlq_bodies(deployment, names["dlq_group"]) == [(f"{sdk}-push-dlq".encode(), 3)]


def test_proxy_requests_behind_the_consumers(deployment, consumed):
    """The remoting requests behind the consumers, answered alike: the groups' configs
    (GET_SUBSCRIPTIONGROUP_CONFIG, retryMaxTimes 1 for the DLQ groups), POP_MESSAGE,
    ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, and the proxy's send-back to the DLQ
    (CONSUMER_SEND_MSG_BACK) of a message delivered retryMaxTimes + 1 times."""
    proxy_support.needs_proxy(deployment)
    found = deployment.broker_exchanges()
    groups = {e.request.ext_fields["group"]: e for e in
              proxy_support.of_code(found, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG)}
    for sdk, ops in CONSUMER_OPS.items():
        for op in ops:
            exchange = groups[consumer_names(sdk, op)["dlq_group"]]
            assert exchange.response.code == ResponseCode.SUCCESS
            assert b'"retryMaxTimes":1' in exchange.response.body
    for code in (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME):
        answered = [e.response.code for e in proxy_support.of_code(found, code)
                    if e.response is not None]
        assert answered and ResponseCode.SUCCESS in answered, code
    send_backs = proxy_support.of_code(found, RequestCode.CONSUMER_SEND_MSG_BACK)
    dlq_groups = {consumer_names(sdk, op)["dlq_group"]
                  for sdk, ops in CONSUMER_OPS.items() for op in ops}
    assert {e.request.ext_fields["group"] for e in send_backs} == dlq_groups
    assert {e.response.code for e in send_backs} == {ResponseCode.SUCCESS}
