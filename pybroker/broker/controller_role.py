# Controller-mode requests a broker answers: the controller's role notification, the epochs.
"""NOTIFY_BROKER_ROLE_CHANGED (1008, from the controller) and GET_BROKER_EPOCH_CACHE (1007,
from mqadmin ``getBrokerEpoch`` / ``pybroker admin getBrokerEpoch``), answered by the metadata
service (routing table: broker/routing.py) with the supervisor's
:class:`pybroker.broker.replicas_manager.ReplicasManager`. Java's AdminBrokerProcessor
answers the notification SUCCESS whatever it decides, and the epoch request SYSTEM_ERROR
"this request only for controllerMode " outside controller mode.
"""
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.protocol import controller as bodies
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_response

__all__ = ["HANDLERS"]

NOT_CONTROLLER_MODE_REMARK = "this request only for controllerMode "


async def notify_broker_role_changed(ctx: MetadataContext, channel, request):
    values = headers.NOTIFY_BROKER_ROLE_CHANGED_REQUEST.parse(request.ext_fields)
    members = bodies.decode_sync_state_set(request.body or b"{}").members
    if ctx.replicas is not None:
        ctx.replicas.on_role_notification(values.master_broker_id, values.master_address,
                                          values.master_epoch, values.sync_state_set_epoch,
                                          members)
    return None if request.is_oneway else create_response(request, ResponseCode.SUCCESS)


async def get_broker_epoch_cache(ctx: MetadataContext, channel, request):
    if ctx.replicas is None:
        return create_response(request, ResponseCode.SYSTEM_ERROR, NOT_CONTROLLER_MODE_REMARK)
    broker_id, entries, max_offset = ctx.replicas.epoch_cache()
    broker = ctx.config.broker
    response = create_response(request, ResponseCode.SUCCESS)
    response.body = bodies.encode_epoch_entry_cache(broker.broker_cluster_name,
                                                    broker.broker_name, broker_id, entries,
                                                    max_offset)
    return response


HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.NOTIFY_BROKER_ROLE_CHANGED: notify_broker_role_changed,
    RequestCode.GET_BROKER_EPOCH_CACHE: get_broker_epoch_cache,
}
