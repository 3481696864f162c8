"""The vendored gRPC code (pybroker/protocol/rocketmq_v2) is exactly what grpcio-tools makes
of the vendored protos: a hand edit, or protos updated without regenerating, fails here.

Method: tools/regen_grpc.py's own generation (in this process: grpcio-tools' protoc) into a
scratch directory with the pinned grpcio-tools release, compared byte for byte; then load the
MessagingService from the vendored modules and check the RPCs pybroker serves are the protos'
own.
"""
from tests.peers import load_tool


def test_vendored_code_matches_the_protos(tmp_path):
    regen = load_tool("regen_grpc")
    files = regen.generate(tmp_path)
    assert sorted(files) == sorted(regen.GENERATED)
    assert regen.differences(files) == [], "run python3 tools/regen_grpc.py"


def test_the_service_has_the_rpcs_of_rocketmq_5():
    from pybroker.protocol.rocketmq_v2 import service_pb2
    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert service.full_name == "apache.rocketmq.v2.MessagingService"
    methods = {method.name: (method.client_streaming, method.server_streaming)
               for method in service.methods}
    assert methods["ReceiveMessage"] == (False, True)
    assert methods["Telemetry"] == (True, True)
    for unary in ("QueryRoute", "Heartbeat", "SendMessage", "QueryAssignment", "AckMessage",
                  "ForwardMessageToDeadLetterQueue", "EndTransaction", "NotifyClientTermination",
                  "ChangeInvisibleDuration", "RecallMessage"):
        assert methods[unary] == (False, False), unary
