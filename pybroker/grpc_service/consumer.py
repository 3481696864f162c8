# ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue.
"""The consumer RPCs run over POP (POP_MESSAGE, ACK_MESSAGE, CHANGE_INVISIBLETIME and the
send-back), which the Java proxy calls on the broker. pybroker's POP is not built yet (issue
#24): until it is, these RPCs check the request as the proxy does (topic and group names) and
answer NOT_IMPLEMENTED, the code the proxy gives a broker's REQUEST_CODE_NOT_SUPPORTED. SDK
consumers therefore start and heartbeat, but receive nothing.
"""
from pybroker.grpc_service import checks
from pybroker.grpc_service.status import Code, GrpcRefused
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb

NOT_SERVED = "POP is not served by this broker yet (pybroker issue #24)"


def _refuse() -> GrpcRefused:
    return GrpcRefused(Code.NOT_IMPLEMENTED, NOT_SERVED)


async def receive_message(host, rctx, request: spb.ReceiveMessageRequest, context):
    checks.validate_topic(request.message_queue.topic.name)
    checks.validate_group(request.group.name)
    raise _refuse()
    yield  # an async generator: the streaming RPC's body


async def ack_message(host, rctx, request: spb.AckMessageRequest) -> spb.AckMessageResponse:
    checks.validate_topic(request.topic.name)
    checks.validate_group(request.group.name)
    raise _refuse()


async def change_invisible_duration(host, rctx, request: spb.ChangeInvisibleDurationRequest):
    checks.validate_topic(request.topic.name)
    checks.validate_group(request.group.name)
    raise _refuse()


async def forward_to_dead_letter_queue(host, rctx,
                                       request: spb.ForwardMessageToDeadLetterQueueRequest):
    checks.validate_topic(request.topic.name)
    checks.validate_group(request.group.name)
    raise _refuse()
