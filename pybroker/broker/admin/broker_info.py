# Admin handlers of the broker itself: runtime figures, settings, statistics items.
"""Broker requests of ``mqadmin`` (brokerStatus, getBrokerConfig, updateBrokerConfig,
statsAll's items), run in the metadata service (protocol.md §2.10)."""
import logging

from pybroker.broker import runtime_settings
from pybroker.broker.admin.answers import answer_error, answer_ok, sorted_json
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.broker.runtime_info import runtime_info
from pybroker.config import all_settings
from pybroker.protocol import bodies
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.headers import parse_request_header

__all__ = ["HANDLERS"]

log = logging.getLogger("pybroker.broker.admin")


async def handle_get_broker_runtime_info(ctx: MetadataContext, channel: ClientChannel,
                                         request: RemotingCommand) -> RemotingCommand | None:
    """GET_BROKER_RUNTIME_INFO (28): KVTable of runtime figures from the supervisor's
    statistics (pybroker/broker/runtime_info.py)."""
    return answer_ok(request, bodies.encode_kv_table(runtime_info(ctx)))


async def handle_get_broker_config(ctx: MetadataContext, channel: ClientChannel,
                                   request: RemotingCommand) -> RemotingCommand | None:
    """GET_BROKER_CONFIG (26): every effective setting as Java Properties text (``key=value``
    lines; unset values left out, as Java leaves out nulls). pybroker keeps no secrets in its
    settings. Response header ``version``: the configuration's DataVersion JSON (Java's
    Configuration.dataVersion)."""
    lines = [f"{key}={value}\n" for key, value in all_settings(ctx.config) if value != ""]
    version = ctx.metadata.config_version
    return create_response(request, ResponseCode.SUCCESS,
                           # Ext values travel as str; _json gives bytes.
                           ext_fields={"version": sorted_json(version.to_json()).decode()},
                           body="".join(lines).encode("utf-8"))


async def handle_update_broker_config(ctx: MetadataContext, channel: ClientChannel,
                                      request: RemotingCommand) -> RemotingCommand | None:
    """UPDATE_BROKER_CONFIG (25): body = properties text. Only the settings a running broker
    reads again change (broker/runtime_settings.py); any other key refuses the whole request
    with NO_PERMISSION naming the key. An empty body changes nothing (Java: SUCCESS)."""
    if not request.body:
        return answer_ok(request)
    try:
        entries = runtime_settings.parse_update(bytes(request.body))
        config = runtime_settings.updated_config(ctx.config, entries)
    except runtime_settings.SettingRefused as refused:
        log.warning("updateBrokerConfig from %s refused: %s", channel.remote_address, refused)
        return answer_error(request, f"updateBrokerConfig: {refused}", ResponseCode.NO_PERMISSION)
    log.info("updateBrokerConfig called by %s: %s", channel.remote_address,
             ", ".join(f"{key}={value}" for key, value in entries.items()))
    ctx.config = config
    ctx.metadata.apply_settings(config)
    return answer_ok(request)


async def handle_view_broker_stats_data(ctx: MetadataContext, channel: ClientChannel,
                                        request: RemotingCommand) -> RemotingCommand | None:
    """VIEW_BROKER_STATS_DATA (315): BrokerStatsData (minute / hour / day sum, tps, avgpt) of
    a StatsItem such as TOPIC_PUT_NUMS <topic> or GROUP_GET_NUMS <topic@group>."""
    header = parse_request_header(request.code, request.ext_fields)
    service = ctx.stats_service
    data = service.view(header.stats_name, header.stats_key) if service is not None else None
    if data is None and service is not None and not service.region.enabled:
        return answer_error(request, "statistics are not recorded on this broker "
                                     "(statsInstrumentsEnable=false)")
    if data is None:
        return answer_error(request,
                            f"The stats <{header.stats_name}> <{header.stats_key}> not exist")
    return answer_ok(request, sorted_json(data))



HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.GET_BROKER_RUNTIME_INFO: handle_get_broker_runtime_info,
    RequestCode.GET_BROKER_CONFIG: handle_get_broker_config,
    RequestCode.UPDATE_BROKER_CONFIG: handle_update_broker_config,
    RequestCode.VIEW_BROKER_STATS_DATA: handle_view_broker_stats_data,
}
