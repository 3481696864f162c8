# Which broker settings UPDATE_BROKER_CONFIG changes while the broker runs, and how.
"""Run-time changes of broker settings (UPDATE_BROKER_CONFIG, request code 25).

Java's broker copies every key of the request into its config objects (and rewrites its
broker.conf); a key takes effect only where Java happens to read the field again. pybroker
changes only the settings listed in :data:`LIVE_SETTINGS`: each is read per request or per
round by the processes the change reaches (the metadata service and the supervisor's services
at once; the remoting workers through the next metadata snapshot). Every other key is refused
naming the key (NO_PERMISSION, as Java 5.x refuses its black-listed keys), and the whole
request then changes nothing: a setting read once at start-up (store paths, ports, flush and
file sizes, which the appender, flusher and dispatcher processes hold) would otherwise be
reported as changed while the broker kept running with the old value.

Changes last until the broker stops (docs/compatibility.md: Java also rewrites broker.conf).
"""
from typing import Mapping

from pybroker.config import (Config, ConfigError, all_settings, broker_setting_area,
                             parse_properties, with_broker_settings)

__all__ = ["LIVE_SETTINGS", "SettingRefused", "parse_update", "updated_config",
           "live_values"]

# key -> where the running broker reads it (what makes the change real).
LIVE_SETTINGS: dict[str, str] = {
    "brokerPermission": "send/pull/send-back checks per request; NameServer registration "
                        "(re-registered at once, topics carry the permission as in Java)",
    "autoCreateTopicEnable": "send path and metadata service, per topic creation",
    "autoCreateSubscriptionGroup": "pull path and metadata service, per unknown group",
    "rejectTransactionMessage": "send path, per prepared message",
    "longPollingEnable": "pull path, per pull that finds nothing",
    "shortPollingTimeMills": "pull path, per pull that finds nothing",
    "notifyConsumerIdsChangedEnable": "metadata service, per consumer-ids change",
    "transactionTimeOut": "transaction check service, per round",
    "transactionCheckMax": "transaction check service, per round",
    "transactionCheckInterval": "transaction check service, before each wait",
    "brokerFastFailureEnable": "remoting workers' fast failure, per put",
    "waitTimeMillsInSendQueue": "remoting workers' fast failure, per put",
    "osPageCacheBusyTimeOutMills": "remoting workers' page-cache busy check, per put",
}


class SettingRefused(ValueError):
    """The update names a setting that cannot change at run time, or a bad value."""


def parse_update(body: bytes) -> dict[str, str]:
    """The request body: Java Properties text in UTF-8 (Java's MixAll.string2Properties)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise SettingRefused("the body is not UTF-8 properties text") from None
    try:
        return parse_properties(text, source="updateBrokerConfig")
    except ConfigError as error:
        raise SettingRefused(f"the body is not properties text: {error}") from None


def updated_config(config: Config, entries: Mapping[str, str]) -> Config:
    """``config`` with ``entries`` applied; raises :class:`SettingRefused` naming the first
    key that is not a broker setting or cannot change at run time, or the bad values."""
    for key in entries:
        if broker_setting_area(key) is None:
            raise SettingRefused(f"{key} is not a broker setting pybroker knows; "
                                 "nothing was changed")
        if key not in LIVE_SETTINGS:
            raise SettingRefused(
                f"{key} cannot be changed while the broker runs (pybroker reads it once at "
                "start-up): set it in broker.conf and restart; nothing was changed")
    try:
        return with_broker_settings(config, entries)
    except ConfigError as error:
        raise SettingRefused(f"{error}; nothing was changed") from None


def live_values(config: Config) -> dict[str, str]:
    """The current value (broker.conf text) of every live setting, for worker snapshots."""
    return {key: value for key, value in all_settings(config) if key in LIVE_SETTINGS}
