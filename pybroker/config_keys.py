# Unknown keys of broker.conf / namesrv.conf: the closest known key, durability keys, strictConfig.
"""What a configuration file's unknown keys become (used by :mod:`pybroker.config`).

Each unknown key is logged with the known key it most likely misspells ("did you mean ...");
when that is a durability setting (:data:`DURABILITY_KEYS`: what an acknowledgement promises,
where the data lives, how long it is kept) the line is an ERROR naming the value in force,
since the misspelling leaves the default running silently. Under ``strictConfig=true`` the
unknown keys are refused instead (:class:`pybroker.errors.ConfigError`, one line each). Keys of
RocketMQ that pybroker does not use are only noted.
"""
import difflib
import logging
from collections.abc import Collection, Mapping

from pybroker.errors import ConfigError

__all__ = ["DURABILITY_KEYS", "closest_key", "check_unknown_keys"]

DURABILITY_KEYS = frozenset({
    "storePathRootDir", "storePathCommitLog", "flushDiskType", "brokerRole", "brokerId",
    "syncFlushTimeout", "flushIntervalCommitLog", "flushCommitLogTimed",
    "flushCommitLogLeastPages", "checkCRCOnRecover", "skipDamagedRecordsOnRecover",
    "transientStorePoolEnable", "deleteWhen", "fileReservedTime", "diskMaxUsedSpaceRatio",
    "cleanFileForciblyEnable", "haMasterAddress", "haMaxGapNotInSync", "haSlaveFallbehindMax"})
_SUGGESTION_CUTOFF = 0.75      # difflib ratio: flushDiskTpye -> flushDiskType is 0.92


def closest_key(key: str, known) -> str | None:
    """The known key ``key`` most likely misspells (case ignored), or None."""
    by_lower = {name.lower(): name for name in known}
    if key.lower() in by_lower:
        return by_lower[key.lower()]
    found = difflib.get_close_matches(key.lower(), list(by_lower), n=1,
                                      cutoff=_SUGGESTION_CUTOFF)
    return by_lower[found[0]] if found else None


def _unknown_key_line(key: str, known, not_used: Collection[str],
                      effective: Mapping[str, str]) -> tuple[int, str]:
    """(log level, text) for an unknown key: the closest known key, and for a durability
    setting the value the broker runs with instead."""
    if key in not_used:
        return logging.WARNING, f"{key}: a RocketMQ setting pybroker does not use (ignored)"
    match = closest_key(key, known)
    if match is None:
        return logging.WARNING, f"{key}: unknown key (ignored)"
    if match in DURABILITY_KEYS:
        return logging.ERROR, (f"{key}: unknown key, ignored - did you mean {match}? {match} "
                               f"is a durability setting and stays {match}="
                               f"{effective.get(match, '')}: correct the key (strictConfig="
                               f"true refuses unknown keys)")
    return logging.WARNING, f"{key}: unknown key (ignored); did you mean {match}?"


def check_unknown_keys(unknown: tuple[str, ...], known, not_used: Collection[str], source: str,
                       strict: bool, effective: Mapping[str, str],
                       logger: logging.Logger) -> None:
    """Log each unknown key of ``source`` (did you mean ...) on ``logger``; under strictConfig
    refuse them all (the keys in ``not_used`` are only noted either way)."""
    refused = []
    for key in unknown:
        level, text = _unknown_key_line(key, known, not_used, effective)
        if strict and key not in not_used:
            match = closest_key(key, known)
            refused.append(f"{key}: unknown key" + (f"; did you mean {match}?" if match else "")
                           + " (strictConfig=true refuses unknown keys)")
        else:
            logger.log(level, "%s: %s", source, text)
    if refused:
        raise ConfigError("\n".join(refused))
