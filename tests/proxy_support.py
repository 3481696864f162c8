# Shared by the rocketmq-proxy tests: a broker (pybroker or Java 5.3.3) behind a proxy, captures.
"""Building blocks of the tests that run Apache's rocketmq-proxy 5.3.3 (CLUSTER mode) in front
of pybroker and in front of the Java 5.3.3 broker: the deployment, the frames the proxy
exchanged with the NameServer and the broker (recorded by tools/capture_proxy.py relays), topic
creation with 5.x attributes and reads of what was stored, all as raw remoting frames, so the
checks depend on no client library.
"""
import contextlib
import dataclasses
import json
import pathlib
import subprocess
import time

import pytest

from pybroker._testbase import certs
from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.grpc_service import front as grpc_front
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request, decode
from tests import progress
from tests.ha_support import client_for, pull, records_of, wait_for

rocketmq_proxy = None   # tools/rocketmq_proxy.py, loaded by deployment() (tests.peers does it)

# Short transaction checks on both brokers (as tests/compat/test_java_features.py); the
# proxy's transaction heartbeat (which tells the broker the producer groups behind it) every
# second instead of every 20 s: a check-back reaches an SDK within seconds.
# transactionTimeOut stays above Java 5.x's transactionOpBatchInterval (3 s, the op messages of
# ended transactions are written in batches): below it Java checks, and may commit a second
# time, transactions the client already ended. recallMessageEnable: RECALL_MESSAGE is off by
# default in Java 5.3.3.
BROKER_SETTINGS = {"transactionCheckInterval": "1000", "transactionTimeOut": "5000",
                   "recallMessageEnable": "true"}
# A push consumer long-polls for the proxy's grpcClientConsumerMaxLongPollingTimeoutMillis (20 s
# by default), and a redelivered message waits for the next poll: 3 s here.
# A push consumer's messages are invisible for defaultInvisibleTimeMills and renewed while the
# client works on them (the proxy's receipt-handle manager, pybroker's grpc_service/renewal.py):
# 12 s, looked at every second, so a listener held 16 s outlasts it (test_sdk_push_renewal).
PROXY_SETTINGS = {"transactionHeartbeatPeriodSecond": 1, "grpcShutdownTimeSeconds": 1,
                  "grpcClientConsumerMinLongPollingTimeoutMillis": 1000,
                  "grpcClientConsumerMaxLongPollingTimeoutMillis": 3000,
                  "defaultInvisibleTimeMills": 12000, "renewSchedulePeriodMillis": 1000}
# The SDKs' own gRPC endpoint of pybroker (issue #26) takes the proxy's long-polling settings
# (and a certificate: TLS and plain on its port, as the proxy serves them; the Go SDK speaks
# TLS by default).
NATIVE_SETTINGS = {"grpcWorkers": "1", "tls.server.mode": "permissive",
                   "grpcClientConsumerMinLongPollingTimeoutMillis": "1000",
                   "grpcClientConsumerMaxLongPollingTimeoutMillis": "3000",
                   "defaultInvisibleTimeMills": "12000", "renewSchedulePeriodMillis": "1000"}
# java, pybroker: behind the proxy; native: the SDKs at pybroker's own gRPC port, no proxy;
# native-front: the same with the C++ front serving the port (grpcNativeFront).
NATIVE_BACKENDS = {"native": False, "native-front": True}
BACKENDS = ("java", "pybroker", *NATIVE_BACKENDS)


@dataclasses.dataclass
class Deployment:
    """A NameServer, one broker and the proxy in front of them (``proxy`` None: the SDKs
    talk to the broker's own gRPC endpoint, ``native_endpoint``)."""
    backend: str
    namesrv_addr: str
    broker_addr: str
    proxy: object           # rocketmq_proxy.RocketMQProxy or None
    native_endpoint: str | None = None

    @property
    def endpoint(self) -> str:
        return self.native_endpoint if self.proxy is None else self.proxy.grpc_endpoint

    def broker_exchanges(self) -> list["Exchange"]:
        return exchanges(self.proxy.capture_dir / "broker-0.jsonl")

    def namesrv_exchanges(self) -> list["Exchange"]:
        return exchanges(self.proxy.capture_dir / "namesrv.jsonl")


@contextlib.contextmanager
def deployment(backend: str, work_dir: pathlib.Path, peers_module, broker_settings=None):
    """pybroker standalone or Java 5.3.3 (NameServer + broker), then the proxy (captured);
    ``native`` / ``native-front``: pybroker standalone serving the SDKs itself."""
    global rocketmq_proxy
    rocketmq_proxy = peers_module.load_tool("rocketmq_proxy")
    settings = dict(BROKER_SETTINGS, **(broker_settings or {}))
    if backend in NATIVE_BACKENDS:
        with _native(backend, work_dir, settings, peers_module) as running:
            yield running
        return
    install = peers_module.java_install("5.3.3")
    with contextlib.ExitStack() as stack:
        if backend == "java":
            broker = stack.enter_context(peers_module.java_broker(
                work_dir / "java", install, broker_overrides=settings))
            # Nothing of the Java broker's store is read after the module: kill -9 saves its
            # graceful stop (15 s and more on a busy box); java_broker's stop then reaps.
            stack.callback(_kill_java, broker)
        else:
            broker = stack.enter_context(StandaloneBroker(work_dir / "pybroker", settings))
        namesrv_addr = f"127.0.0.1:{broker.namesrv_port}"
        broker_addr = f"127.0.0.1:{broker.broker_port}"
        proxy = rocketmq_proxy.RocketMQProxy(
            work_dir / "proxy", namesrv_addr, install, free_ports=True,
            config_overrides=PROXY_SETTINGS, capture_brokers=[broker_addr])
        with progress.stage(f"rocketmq-proxy 5.3.3 in front of {backend}"):
            proxy.start()
        stack.callback(proxy.stop, graceful=False)
        yield Deployment(backend, namesrv_addr, broker_addr, proxy)


@contextlib.contextmanager
def _native(backend: str, work_dir: pathlib.Path, settings: dict[str, str], peers_module):
    missing = certs.openssl_missing()
    if missing:
        peers_module.unavailable(missing)
    front = NATIVE_BACKENDS[backend]
    if front and not grpc_front.built():
        peers_module.unavailable("the gRPC front is not built (libgrpc++-dev missing at build "
                                 "time)")
    certificates = certs.make_certificates(work_dir / "certs")
    port = free_port()
    settings = dict(settings, **NATIVE_SETTINGS, grpcServerPort=str(port),
                    grpcNativeFront=str(front).lower())
    settings.update({"tls.server.certPath": str(certificates.server_cert),
                     "tls.server.keyPath": str(certificates.server_key)})
    with StandaloneBroker(work_dir / "pybroker", settings) as broker:
        yield Deployment(backend, f"127.0.0.1:{broker.namesrv_port}",
                         f"127.0.0.1:{broker.broker_port}", None, f"127.0.0.1:{port}")


def needs_proxy(deployment: Deployment) -> None:
    """Skip a check of what the proxy exchanged with the broker: there is none natively."""
    if deployment.proxy is None:
        pytest.skip("no proxy: the SDKs talk to pybroker's own gRPC endpoint")


def _kill_java(broker) -> None:
    for role in ("broker", "namesrv"):
        if role in broker.processes:
            broker.kill(role)


# --- what the proxy exchanged ------------------------------------------------------------------

@dataclasses.dataclass
class Exchange:
    """One request on a captured connection and its answer (None: oneway or not answered).
    ``from_proxy`` is False for a request the broker sent the proxy (39, 40)."""
    time: float
    from_proxy: bool
    request: RemotingCommand
    response: RemotingCommand | None
    answered_at: float | None = None

    @property
    def code(self) -> int:
        return self.request.code


def exchanges(path: pathlib.Path) -> list[Exchange]:
    """Every request in a capture file, in order, each with its answer when one came."""
    found, waiting = [], {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        record = json.loads(line)
        data = bytes.fromhex(record["hex"])
        command = decode(data, 0, len(data), copy_body=True)
        key = (record["conn"], record["dir"], command.opaque)
        if command.is_response:
            # The answer travels the other way on the same connection.
            asked = "s2c" if record["dir"] == "c2s" else "c2s"
            exchange = waiting.pop((record["conn"], asked, command.opaque), None)
            if exchange is not None:
                exchange.response, exchange.answered_at = command, record["t"]
            continue
        exchange = Exchange(record["t"], record["dir"] == "c2s", command, None)
        found.append(exchange)
        if not command.is_oneway:
            waiting[key] = exchange
    return found


def of_code(found: list[Exchange], code: int, from_proxy: bool = True) -> list[Exchange]:
    return [e for e in found if e.code == code and e.from_proxy == from_proxy]


# --- topics and what was stored ----------------------------------------------------------------

def create_topic(broker_addr: str, topic: str, message_type: str | None = None,
                 queues: int = 4) -> None:
    """UPDATE_AND_CREATE_TOPIC with the 5.x attribute message.type (as mqadmin 5.x sends it)."""
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
              "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
              "topicSysFlag": "0", "order": "false"}
    if message_type is not None:
        fields["attributes"] = f"+message.type={message_type}"
    client = client_for(broker_addr)
    try:
        response = client.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields),
                                 5000)
    finally:
        client.close()
    assert response.code == ResponseCode.SUCCESS, (topic, response.code, response.remark)


def create_group(broker_addr: str, group: str, retry_max_times: int = 16,
                 retry_every_ms: int | None = None) -> None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ``retry_max_times`` + 1 is the delivery attempts the
    proxy allows the group's 5.x consumers before it forwards a message to the DLQ;
    ``retry_every_ms`` gives the group the 5.x retry policy EXPONENTIAL with that initial and
    maximum back-off (a push consumer redelivers a failed message after it; the default policy
    waits 10 s and more)."""
    config = {"groupName": group, "consumeEnable": True, "consumeFromMinEnable": True,
              "consumeBroadcastEnable": True, "retryQueueNums": 1,
              "retryMaxTimes": retry_max_times, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
              "notifyConsumerIdsChangedEnable": True}
    if retry_every_ms is not None:
        config["groupRetryPolicy"] = {"type": "EXPONENTIAL", "exponentialRetryPolicy": {
            "initial": retry_every_ms, "max": retry_every_ms, "multiplier": 1}}
    body = json.dumps(config).encode()
    client = client_for(broker_addr)
    try:
        response = client.invoke(create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                                {}, body), 5000)
    finally:
        client.close()
    assert response.code == ResponseCode.SUCCESS, (group, response.code, response.remark)


def stored(broker_addr: str, topic: str, queues: int = 4) -> list:
    """Every record of ``topic`` on the broker (raw pulls of each queue), in queue order."""
    client = client_for(broker_addr)
    found = []
    try:
        for queue_id in range(queues):
            offset = 0
            while True:
                response = pull(client, topic, queue_id, offset, group="proxy_test_reader")
                if response.code != ResponseCode.SUCCESS:
                    break
                records = records_of(response.body)
                found.extend(records)
                offset = records[-1].queue_offset + 1
    finally:
        client.close()
    return found


def stored_properties(record) -> dict[str, str]:
    return props.decode_properties(record.properties)


def wait_stored(broker_addr: str, topic: str, count: int, timeout_s: float) -> list:
    """The records of ``topic`` once there are ``count`` of them (AssertionError at the
    deadline, naming what was there)."""
    seen: list = []

    def enough():
        seen[:] = stored(broker_addr, topic)
        return len(seen) >= count
    try:
        wait_for(enough, timeout_s, f"{count} records in {topic}", 0.25)
    except AssertionError as error:
        bodies = [bytes(record.body)[:64] for record in seen]
        raise AssertionError(f"{error} (have {len(seen)}: {bodies})") from None
    return seen



# --- the SDK programs ---------------------------------------------------------------------------

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYTHON_SDK_PROGRAM = ROOT / "tools" / "proxy_sdk" / "python_sdk.py"
JAVA_SDK_SOURCE = ROOT / "tools" / "proxy_sdk" / "JavaSdk.java"
SDKS = ("python", "java", "go")


def sdk_argv(sdk: str, endpoint: str, peers_module) -> list[str]:
    """The command line that runs one SDK's scenario program against ``endpoint``."""
    if sdk == "python":
        return [str(peers_module.python_sdk_python()), str(PYTHON_SDK_PROGRAM), "--endpoint",
                endpoint]
    if sdk == "java":
        lib = peers_module.java_sdk()
        classes = peers_module.compiled_java(lib, JAVA_SDK_SOURCE)
        return ["java", "-Xms64m", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-cp", lib.classpath([classes]), "JavaSdk", endpoint]
    return [str(peers_module.go_sdk_path()), endpoint]


def run_sdks(runs: dict[str, list[str]], endpoint: str, peers_module,
             timeout_s: float = 180) -> dict[str, list[dict]]:
    """Run each SDK's program with its ops at once (their waits overlap); {sdk: RESULT dicts},
    each list ending with ``{"op": "exit", "code": ..., "output": ...}`` (a program that
    stopped early is a result the tests judge, see :func:`exited`). One that overruns
    timeout_s is killed (code None)."""
    argvs = {sdk: sdk_argv(sdk, endpoint, peers_module) + ops for sdk, ops in runs.items()}
    started = {sdk: subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
               for sdk, argv in argvs.items()}
    outputs, deadline = {}, time.monotonic() + timeout_s
    try:
        for sdk, process in started.items():
            code: int | None
            try:
                out, err = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
                code = process.returncode
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
                code = None
            outputs[sdk] = [peers_module.parse_result_line(line) for line in out.splitlines()
                            if line.startswith("RESULT ")]
            outputs[sdk].append({"op": "exit", "code": code,
                                 "output": f"{out[-2000:]}\n{err[-3000:]}"})
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    return outputs


def exited(results: list[dict]) -> None:
    """AssertionError with the program's output unless it ran to its end and exited 0."""
    (end,) = results_of(results, "exit")
    assert end["code"] == 0, f"the SDK program exited {end['code']}:\n{end['output']}"


def results_of(results: list[dict], op: str) -> list[dict]:
    return [entry for entry in results if entry["op"] == op]
