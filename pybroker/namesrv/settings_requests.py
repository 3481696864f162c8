# GET_NAMESRV_CONFIG / UPDATE_NAMESRV_CONFIG: a running NameServer's settings (mqadmin's
# getNamesrvConfig / updateNamesrvConfig).
"""The NameServer's settings over the protocol (request codes 319 and 318).

GET_NAMESRV_CONFIG answers every effective setting as Properties text (``key=value`` a line;
secrets left out), as Java's ``Configuration.getAllConfigsFormatString``.

UPDATE_NAMESRV_CONFIG takes Properties text. Java copies every key into its config objects
and persists them (refusing only its black list: configBlackList, configStorePath,
kvConfigPath and rocketmqHome, the CVE-2023-33246/37582 class). pybroker changes only the
settings in :data:`LIVE_SETTINGS`, which the running NameServer reads again; every other key
is refused naming it (NO_PERMISSION, as Java refuses a black-listed key) and the request then
changes nothing (docs/security-and-faults.md, S1). A change lasts until the NameServer stops.
Under ``aclEnable`` both codes need an admin account (pybroker.acl.resources).
"""
import logging
from collections.abc import Callable

from pybroker.config import (ConfigError, NamesrvProcessConfig, namesrv_setting_area,
                             parse_properties, settings_text, with_namesrv_settings)
from pybroker.namesrv.processor import Handler
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response

__all__ = ["LIVE_SETTINGS", "NamesrvSettingsRequests"]

log = logging.getLogger(__name__)

# key -> where the running NameServer reads it again.
LIVE_SETTINGS: dict[str, str] = {
    "orderMessageEnable": "route requests, per request",
    "scanNotActiveBrokerInterval": "the expired-broker scan, before its next wait",
    "brokerChannelExpiredTimeMs": "the expired-broker scan, per scan",
}


class NamesrvSettingsRequests:
    """The two handlers over the NameServer's current config. ``config()`` returns it;
    ``apply(new_config)`` makes a changed one current (the controller hands it to the route
    table, the processor and the scan)."""

    def __init__(self, config: Callable[[], NamesrvProcessConfig],
                 apply: Callable[[NamesrvProcessConfig], None]):
        self.config = config
        self.apply = apply
        self.handlers: dict[int, Handler] = {
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_config}

    async def get_config(self, connection, request: RemotingCommand) -> RemotingCommand:
        """GET_NAMESRV_CONFIG 319: every effective setting, Properties text in UTF-8."""
        return create_response(request, ResponseCode.SUCCESS,
                               body=settings_text(self.config()).encode())

    async def update_config(self, connection, request: RemotingCommand) -> RemotingCommand:
        """UPDATE_NAMESRV_CONFIG 318: change live settings; anything else refused whole."""
        try:
            entries = parse_properties(bytes(request.body or b"").decode("utf-8"),
                                       source="updateNamesrvConfig")
        except (UnicodeDecodeError, ConfigError) as error:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"the body is not UTF-8 properties text: {error}")
        refusal = _refusal(entries)
        if refusal is not None:
            log.warning("updateNamesrvConfig from %s refused: %s",
                        getattr(connection, "remote_address", "?"), refusal)
            return create_response(request, ResponseCode.NO_PERMISSION, refusal)
        try:
            changed = with_namesrv_settings(self.config(), entries)
        except ConfigError as error:
            return create_response(request, ResponseCode.NO_PERMISSION,
                                   f"{error}; nothing was changed")
        self.apply(changed)
        log.info("updateNamesrvConfig from %s: %s", getattr(connection, "remote_address", "?"),
                 ", ".join(f"{key}={value}" for key, value in sorted(entries.items())))
        return create_response(request, ResponseCode.SUCCESS)


def _refusal(entries: dict[str, str]) -> str | None:
    """Why ``entries`` cannot be applied (the first key that cannot change), or None."""
    for key in entries:
        if namesrv_setting_area(key) is None:
            return f"{key} is not a NameServer setting pybroker knows; nothing was changed"
        if key not in LIVE_SETTINGS:
            return (f"{key} cannot be changed while the NameServer runs (pybroker reads it "
                    "once at start-up): set it in namesrv.conf and restart; nothing was "
                    "changed")
    return None
