"""`pybroker namesrv` serves brokers and clients over real sockets and shuts down cleanly.

Method: start `python -m pybroker namesrv -c <conf>` as a subprocess on a free 127.0.0.1 port
(its log goes to a file in tmp_path; readiness is its "boot success" line), register a fake
broker with REGISTER_BROKER + topic config body over a real connection, then look routes up
(both key forms), read cluster info, use the KV config, close the broker's connection, and stop
the process with SIGTERM. Expiry after 120 s of silence is driven in-process by a controlled
clock (NamesrvController on a real socket). Every wait has a deadline that fails the test.
"""
import asyncio
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from pybroker._testbase.ports import free_port
from pybroker.config import load_namesrv_config, parse_properties
from pybroker.namesrv.server import NamesrvController
from pybroker.protocol import bodies
from pybroker.protocol.codes import RequestCode as C
from pybroker.protocol.codes import ResponseCode as R
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import MQVersion
from pybroker.remoting.client import RemotingClient, SyncRemotingClient

ROOT = pathlib.Path(__file__).resolve().parents[2]
BOOT_LINE = "The Name Server boot success"
START_TIMEOUT_S = 20
BROKER_ADDRESS = "127.0.0.1:10911"


class NamesrvProcess:
    """One `pybroker namesrv` subprocess with its config and log under a directory."""

    def __init__(self, directory: pathlib.Path):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = directory / f"namesrv-{self.port}.log"
        conf = directory / "namesrv.conf"
        conf.write_text(f"listenPort={self.port}\nkvConfigPath={directory / 'kvConfig.json'}\n"
                        "scanNotActiveBrokerInterval=1000\n")
        with open(self.log_path, "wb") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pybroker", "namesrv", "-c", str(conf)], cwd=ROOT,
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT)
        self._wait_booted()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _wait_booted(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while BOOT_LINE not in self.log_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"namesrv did not boot:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


@pytest.fixture
def namesrv(tmp_path):
    process = NamesrvProcess(tmp_path)
    yield process
    process.stop()


@pytest.fixture
def client(namesrv):
    with SyncRemotingClient() as sync_client:
        sync_client.connect(namesrv.address)
        yield sync_client


def register_request(topics=("TopicA",)):
    body = bodies.encode_register_broker_body(bodies.RegisterBrokerBody(
        bodies.DataVersion(int(time.time() * 1000), 1),
        {name: {"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
         for name in topics}), compressed=False)
    return create_request(C.REGISTER_BROKER, {
        "brokerName": "broker-a", "brokerAddr": BROKER_ADDRESS, "clusterName": "DefaultCluster",
        "haServerAddr": "127.0.0.1:10912", "brokerId": "0", "compressed": "false",
        "bodyCrc32": str(bodies.body_crc32(body))}, body)


def route(client, topic, version=int(MQVersion.V4_9_8)):
    request = create_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    request.version = version
    return client.invoke(request)


def test_register_route_cluster_info_and_kv(namesrv, client):
    assert route(client, "TopicA").code == R.TOPIC_NOT_EXIST
    response = client.invoke(register_request())
    assert response.code == R.SUCCESS, response.remark
    quoted = route(client, "TopicA")
    bare = route(client, "TopicA", version=317)
    assert quoted.code == bare.code == R.SUCCESS
    assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in bytes(quoted.body)
    assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in bytes(bare.body)
    assert bodies.decode_topic_route(bare.body).queue_datas == [
        bodies.QueueData("broker-a", 4, 4, 6, 0)]
    missing = route(client, "NoSuchTopic")
    assert missing.code == R.TOPIC_NOT_EXIST == 17
    assert "No topic route info in name server for the topic: NoSuchTopic" in missing.remark
    info = bodies.decode_cluster_info(client.invoke(create_request(C.GET_BROKER_CLUSTER_INFO)).body)
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: BROKER_ADDRESS}
    kv = {"namespace": "NS", "key": "k"}
    assert client.invoke(create_request(C.PUT_KV_CONFIG, {**kv, "value": "v"})).code == R.SUCCESS
    assert client.invoke(create_request(C.GET_KV_CONFIG, kv)).ext_fields == {"value": "v"}
    assert client.invoke(create_request(C.DELETE_KV_CONFIG, kv)).code == R.SUCCESS
    assert client.invoke(create_request(C.GET_KV_CONFIG, kv)).code == R.QUERY_NOT_FOUND
    unsupported = client.invoke(create_request(C.SEND_MESSAGE))
    assert unsupported.code == R.REQUEST_CODE_NOT_SUPPORTED


def test_broker_connection_closed_drops_route(namesrv, client):
    with SyncRemotingClient() as broker:
        broker.connect(namesrv.address)
        assert broker.invoke(register_request()).code == R.SUCCESS
        assert route(client, "TopicA").code == R.SUCCESS
    deadline = time.monotonic() + 5
    while route(client, "TopicA").code != R.TOPIC_NOT_EXIST:
        assert time.monotonic() < deadline, "route still present 5 s after the broker left"
        time.sleep(0.05)
    info = bodies.decode_cluster_info(client.invoke(create_request(C.GET_BROKER_CLUSTER_INFO)).body)
    assert info.broker_addr_table == {}


def test_sigterm_exits_zero_and_kv_survives_restart(namesrv, client, tmp_path):
    kv = {"namespace": "NS", "key": "k", "value": "kept"}
    assert client.invoke(create_request(C.PUT_KV_CONFIG, kv)).code == R.SUCCESS
    assert namesrv.stop() == 0
    text = namesrv.log_text()
    assert f"serializeType=JSON, listening on {namesrv.address}" in text
    assert "Traceback" not in text
    again = NamesrvProcess(tmp_path)
    try:
        with SyncRemotingClient() as second:
            second.connect(again.address)
            got = second.invoke(create_request(C.GET_KV_CONFIG, {"namespace": "NS", "key": "k"}))
            assert got.ext_fields == {"value": "kept"}
    finally:
        assert again.stop() == 0


def test_bad_config_exits_nonzero(tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=notaport\n")
    result = subprocess.run([sys.executable, "-m", "pybroker", "namesrv", "-c", str(conf)],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "listenPort" in result.stderr


def test_expired_broker_is_dropped_and_its_connection_closed(tmp_path):
    # In-process: the scan runs on a controlled clock instead of waiting 120 s.
    clock = [1_700_000_000_000]
    config = load_namesrv_config(overrides={"listenPort": free_port(),
                                            "kvConfigPath": str(tmp_path / "kv.json")})

    async def scenario():
        controller = NamesrvController(config, now_ms=lambda: clock[0])
        address = await controller.start()
        broker = RemotingClient()
        await broker.connect(address)
        try:
            assert (await broker.invoke(register_request())).code == R.SUCCESS
            clock[0] += 120_000
            controller.scan_not_active_brokers()
            assert controller.route_table.topic_route("TopicA") is not None
            clock[0] += 1
            controller.scan_not_active_brokers()
            assert controller.route_table.topic_route("TopicA") is None
            await asyncio.wait_for(broker.wait_closed(), 5)
            assert not broker.is_connected
        finally:
            broker.close()
            await controller.stop()

    asyncio.run(scenario())


def test_settings_read_and_changed_at_run_time(tmp_path):
    """GET_NAMESRV_CONFIG answers every effective setting; UPDATE_NAMESRV_CONFIG changes the
    live ones where the NameServer reads them (orderMessageEnable in routes, the expiry of
    the broker scan) and refuses the rest whole, naming the key (NO_PERMISSION, as Java
    refuses its black list); mqadmin getNamesrvConfig/updateNamesrvConfig use these."""
    clock = [1_700_000_000_000]
    config = load_namesrv_config(overrides={"listenPort": free_port(),
                                            "kvConfigPath": str(tmp_path / "kv.json")})

    async def scenario():
        controller = NamesrvController(config, now_ms=lambda: clock[0])
        address = await controller.start()
        client = RemotingClient()
        await client.connect(address)
        try:
            got = await client.invoke(create_request(C.GET_NAMESRV_CONFIG))
            settings = parse_properties(bytes(got.body).decode())
            assert settings["orderMessageEnable"] == "false"
            assert settings["kvConfigPath"] == str(tmp_path / "kv.json")
            body = b"orderMessageEnable=true\nbrokerChannelExpiredTimeMs=5000\n"
            update = create_request(C.UPDATE_NAMESRV_CONFIG, body=body)
            assert (await client.invoke(update)).code == R.SUCCESS
            assert controller.processor.order_message_enable is True
            assert controller.route_table.broker_channel_expired_time_ms == 5000
            broker = RemotingClient()      # the scan closes an expired broker's connection
            await broker.connect(address)
            assert (await broker.invoke(register_request())).code == R.SUCCESS
            clock[0] += 5001
            controller.scan_not_active_brokers()
            assert controller.route_table.topic_route("TopicA") is None
            broker.close()
            for body, named in ((b"kvConfigPath=/tmp/elsewhere\n", "kvConfigPath"),
                                (b"orderMessageEnable=false\nconfigStorePath=/etc\n",
                                 "configStorePath"),
                                (b"scanNotActiveBrokerInterval=1\n",
                                 "scanNotActiveBrokerInterval")):
                refused = await client.invoke(create_request(C.UPDATE_NAMESRV_CONFIG, body=body))
                assert refused.code == R.NO_PERMISSION and named in refused.remark, refused
            assert controller.processor.order_message_enable is True   # nothing changed
            got = await client.invoke(create_request(C.GET_NAMESRV_CONFIG))
            assert b"orderMessageEnable=true\n" in bytes(got.body)
        finally:
            client.close()
            await controller.stop()

    asyncio.run(scenario())
