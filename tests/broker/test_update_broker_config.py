"""UPDATE_BROKER_CONFIG changes the settings a running broker reads again, and only those.

Method: a real `pybroker standalone`; raw remoting requests over 127.0.0.1 (SyncRemotingClient).
A key read once at start-up (maxMessageSize), an unknown key and a bad value are refused with
NO_PERMISSION naming the key, and nothing changes, not even the good key of the same request.
A live key changes what GET_BROKER_CONFIG answers (with a new DataVersion) and what the
remoting workers do: autoCreateTopicEnable=false makes a send to a new topic TOPIC_NOT_EXIST;
brokerPermission=2 refuses pulls; brokerPermission=4 re-registers, and the NameServer's route
shows perm 4 (Java's registerBrokerAll). Waits are on conditions with a deadline: the workers
take the change with the next metadata snapshot.
"""
import contextlib
import pathlib
import time

import orjson
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.config import parse_properties
from pybroker.protocol import bodies
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient
from pybroker.store import paths

pytestmark = [pytest.mark.slow]
TIMEOUT_MS = 10_000


def _update(client, text: str):
    return client.invoke(create_request(RequestCode.UPDATE_BROKER_CONFIG, {},
                                        text.encode()), TIMEOUT_MS)


def _config(client) -> tuple[dict[str, str], int]:
    response = client.invoke(create_request(RequestCode.GET_BROKER_CONFIG, {}), TIMEOUT_MS)
    assert response.code == ResponseCode.SUCCESS
    lines = bytes(response.body).decode().splitlines()
    version = orjson.loads(response.ext_fields["version"])
    return dict(line.split("=", 1) for line in lines), version["counter"]


def _send(client, topic: str):
    properties = props.encode_properties({"TAGS": "T", "WAIT": "true"})
    ext = {"a": "update_config_producer", "b": topic, "c": "TBW102", "d": "4", "e": "0",
           "f": "0", "g": "1700000000000", "h": "0", "i": properties, "j": "0", "k": "false",
           "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, b"body"), TIMEOUT_MS)


def _pull(client, topic: str):
    ext = {"consumerGroup": "update_config_group", "topic": topic, "queueId": "0",
           "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
           "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
           "expressionType": "TAG"}
    return client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)


def _route_perms(namesrv, topic: str) -> set[int]:
    response = namesrv.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                            {"topic": topic}), TIMEOUT_MS)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return {queue.perm for queue in bodies.decode_topic_route(response.body).queue_datas}


def _until(what: str, probe, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@contextlib.contextmanager
def _connected(address: str):
    with SyncRemotingClient() as client:
        client.connect(address)
        yield client


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("update_config")) as running:
        yield running


@pytest.mark.parametrize("text, key", [
    ("maxMessageSize=4194000", "maxMessageSize"),
    ("autoCreateTopicEnable=false\nflushIntervalCommitLog=100", "flushIntervalCommitLog"),
    ("noSuchBrokerKey=1", "noSuchBrokerKey"),
    ("shortPollingTimeMills=soon", "shortPollingTimeMills"),
    ("shortPollingTimeMills=900\nrocketmqHome=/tmp/x", "rocketmqHome"),
    ("brokerConfigPath=/tmp/x", "brokerConfigPath"),
])
def test_refused_keys_name_the_key_and_change_nothing(broker, text, key):
    with _connected(broker.broker_addr) as client:
        before, version = _config(client)
        response = _update(client, text)
        assert response.code == ResponseCode.NO_PERMISSION
        assert key in response.remark and "nothing was changed" in response.remark
        assert _config(client) == (before, version)


def test_auto_create_topic_enable_reaches_the_send_path(broker):
    with _connected(broker.broker_addr) as client:
        _, version = _config(client)
        assert _update(client, "autoCreateTopicEnable=false").code == \
            ResponseCode.SUCCESS
        values, new_version = _config(client)
        assert values["autoCreateTopicEnable"] == "false" and new_version == version + 1
        # ... and <store>/run/broker.conf, what tools attached by store directory read.
        running = parse_properties(pathlib.Path(paths.running_settings_path(
            broker.store_dir)).read_text(encoding="iso-8859-1"))
        assert running["autoCreateTopicEnable"] == "false"
        assert running["storePathRootDir"] == broker.store_dir
        # Every worker takes it with its next snapshot: sends on new connections land on
        # any worker, so all of them must refuse (a few rounds of fresh connections).
        for round_number in range(6):
            topic = f"NotCreated{round_number}"
            with _connected(broker.broker_addr) as fresh:
                _until("the send refusal", lambda fresh=fresh, topic=topic: _send(
                    fresh, topic).code == ResponseCode.TOPIC_NOT_EXIST)
        assert _update(client, "autoCreateTopicEnable=true").code == \
            ResponseCode.SUCCESS
        _until("sends to be accepted again", lambda: _send(
            client, "CreatedAgain").code == ResponseCode.SUCCESS)


def test_broker_permission_reaches_pulls_and_the_name_server(broker):
    topic = "PermissionTopic"
    with _connected(broker.broker_addr) as client, _connected(broker.namesrv_addr) as namesrv:
        _until("the topic", lambda: _send(client, topic).code == ResponseCode.SUCCESS)
        _until("the route", lambda: _route_perms(namesrv, topic) == {6})
        assert _update(client, "brokerPermission=2").code == ResponseCode.SUCCESS
        response = _until("the pull refusal", lambda: (lambda answer: answer if answer.code
                          == ResponseCode.NO_PERMISSION else None)(_pull(client, topic)))
        assert "pulling message is forbidden" in response.remark
        assert _update(client, "brokerPermission=4").code == ResponseCode.SUCCESS
        _until("the read-only route", lambda: _route_perms(namesrv, topic) == {4})
        assert _pull(client, topic).code in (ResponseCode.SUCCESS,
                                                     ResponseCode.PULL_NOT_FOUND)
        assert _update(client, "brokerPermission=6").code == ResponseCode.SUCCESS
        _until("the read-write route", lambda: _route_perms(namesrv, topic) == {6})
