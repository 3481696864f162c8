"""Goal: the gRPC port takes the same tls.* and ACL settings as the remoting ports. With
tls.server.mode=permissive and a certificate it serves TLS and plain HTTP/2 on one port; with
aclEnable=true every call is checked against plain_acl.yml with the 5.x SDK's signature
(HMAC-SHA1 of x-mq-date-time, hex, in ``authorization``), refusals UNAUTHORIZED with the ACL's
message; with enforcing, a plain client cannot talk to it.

Method: real brokers (openssl-made certificates, a plain_acl.yml in the test's directory) and
grpcio's client over a TLS channel trusting the test CA and over a plain channel; metadata
signed as rocketmq-python-client signs it. Each runs with grpcio serving the port and with the
C++ front (grpcNativeFront: its own TLS listener when enforcing, behind the worker's first-byte
relay when permissive).
"""
import datetime
import hashlib
import hmac

import grpc
import pytest

from pybroker._testbase import certs
from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.acl.signature import sign_request
from pybroker.grpc_service import front as grpc_front
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.protocol.rocketmq_v2 import service_pb2_grpc
from tests.ha_support import client_for
from tests.peers import unavailable

pytestmark = [pytest.mark.timeout(180)]
SERVED_BY = pytest.mark.parametrize("front", [False, True], ids=["grpcio", "front"])

PRODUCER = ("grpc-producer", "grpc-secret-1")
ADMIN = ("grpc-admin", "grpc-admin-secret")
ACL_TEXT = f"""
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {PRODUCER[0]}
    secretKey: {PRODUCER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [grpc_orders=PUB]
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    missing = certs.openssl_missing()
    if missing:
        pytest.skip(missing)
    return certs.make_certificates(tmp_path_factory.mktemp("certs"))


def _broker(tmp_path_factory, certificates, mode: str, acl: bool, front: bool):
    if front and not grpc_front.built():
        unavailable("the gRPC front is not built (libgrpc++-dev missing at build time)")
    work = tmp_path_factory.mktemp(f"grpc-{mode}")
    port = free_port()
    settings = {"grpcWorkers": "1", "grpcServerPort": str(port), "tls.server.mode": mode,
                "tls.server.certPath": str(certificates.server_cert),
                "tls.server.keyPath": str(certificates.server_key),
                "grpcNativeFront": str(front).lower()}
    if acl:
        (work / "plain_acl.yml").write_text(ACL_TEXT)
        settings.update({"aclEnable": "true",
                         "rocketmq.acl.plain.file": str(work / "plain_acl.yml")})
    return StandaloneBroker(work, settings).start(), port


def _channels(certificates, port: int):
    tls = grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(
        root_certificates=certificates.ca_cert.read_bytes()))
    plain = grpc.insecure_channel(f"127.0.0.1:{port}")
    return tls, plain


def _metadata(account=None, secret=None) -> tuple:
    """The headers rocketmq-python-client sends, signed with ``account`` when given."""
    date_time = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    metadata = [("x-mq-client-id", "secure-client@1"), ("x-mq-language", "PYTHON"),
                ("x-mq-date-time", date_time)]
    if account is not None:
        signature = hmac.new((secret or account[1]).encode(), date_time.encode(),
                             hashlib.sha1).hexdigest()
        metadata.append(("authorization", f"MQv2-HMAC-SHA1 Credential={account[0]}, "
                         f"SignedHeaders=x-mq-date-time, Signature={signature}"))
    return tuple(metadata)


def _route(channel, topic: str, metadata) -> pb.Status:
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    return stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
                           metadata=metadata, timeout=15).status


def _create_topic(broker, topic: str) -> None:
    remoting = client_for(broker.broker_addr)
    try:
        fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "2",
                  "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG",
                  "topicSysFlag": "0", "order": "false"}
        request = create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        sign_request(request.ext_fields, None, *ADMIN)
        assert remoting.invoke(request, 5000).code == ResponseCode.SUCCESS
    finally:
        remoting.close()


@SERVED_BY
def test_permissive_tls_and_acl(tmp_path_factory, certificates, front):
    broker, port = _broker(tmp_path_factory, certificates, "permissive", acl=True, front=front)
    tls, plain = _channels(certificates, port)
    try:
        _create_topic(broker, "grpc_orders")
        _create_topic(broker, "grpc_secret")
        for channel in (tls, plain):    # permissive: both kinds of connection are served
            status = _route(channel, "grpc_orders", _metadata(PRODUCER))
            assert (status.code, status.message) == (pb.OK, "OK")
        refusals = [
            (_metadata(), "No accessKey is configured"),
            (_metadata(("nobody", "x")), "No acl config for nobody"),
            (_metadata(PRODUCER, secret="wrong"),
             f"Check signature failed for accessKey={PRODUCER[0]}")]
        for metadata, message in refusals:
            status = _route(tls, "grpc_orders", metadata)
            assert (status.code, status.message) == (pb.UNAUTHORIZED, message)
        denied = _route(tls, "grpc_secret", _metadata(PRODUCER))
        assert (denied.code, denied.message) == (pb.UNAUTHORIZED,
                                                 "No default permission for topic:grpc_secret")
        stub = service_pb2_grpc.MessagingServiceStub(tls)
        message = pb.Message(topic=pb.Resource(name="grpc_orders"), body=b"over TLS",
                             system_properties=pb.SystemProperties(message_id="SECURE-1"))
        sent = stub.SendMessage(spb.SendMessageRequest(messages=[message]),
                                metadata=_metadata(PRODUCER), timeout=15)
        assert sent.status.code == pb.OK, sent.status
    finally:
        tls.close()
        plain.close()
        assert broker.stop() == 0


@SERVED_BY
def test_enforcing_serves_tls_only(tmp_path_factory, certificates, front):
    broker, port = _broker(tmp_path_factory, certificates, "enforcing", acl=False, front=front)
    tls, plain = _channels(certificates, port)
    try:
        # (the remoting ports are enforcing too: no plain remoting client creates a topic)
        assert _route(tls, "grpc_orders", _metadata()).code == pb.TOPIC_NOT_FOUND
        with pytest.raises(grpc.RpcError) as refused:
            _route(plain, "grpc_orders", _metadata())
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        tls.close()
        plain.close()
        assert broker.stop() == 0
