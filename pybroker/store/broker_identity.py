# The controller-assigned broker id of a store: brokerIdentity and brokerIdentity-temp.
"""Persistent broker identity in controller mode (Java 5.x ``BrokerMetadata`` /
``TempBrokerMetadata``, docs/en/controller/persistent_unique_broker_id.md).

A controller-mode broker asks the controller for the next free id of its broker set, writes
the application to ``<storePathBrokerIdentity>-temp`` (``cluster#broker#id#registerCheckCode``),
applies it, and on success writes ``<storePathBrokerIdentity>`` (``cluster#broker#id``) and
deletes the temp file. After a crash the two files say which step to resume at
(:func:`register_state`). Text without a trailing newline, as Java writes it, so either broker
reads the other's files. Writes use the store's safe write.
"""
import dataclasses
import enum
import logging
import os

from pybroker.store import config_docs

log = logging.getLogger("pybroker.store.broker_identity")

__all__ = ["BrokerIdentity", "RegisterState", "read_identity", "write_identity",
           "read_application", "write_application", "clear_application", "register_state",
           "temp_path"]

_SEPARATOR = "#"


@dataclasses.dataclass(frozen=True)
class BrokerIdentity:
    """``cluster_name``, ``broker_name``, ``broker_id`` (the controller's id, >= 1) and, for an
    application in progress, its ``register_check_code`` (``ip:port;epochMillis``)."""
    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str | None = None


class RegisterState(enum.Enum):
    """Java's ``ReplicasManager.RegisterState``: where a registration resumes."""
    INITIAL = "INITIAL"                                  # ask for the next broker id
    CREATE_TEMP_METADATA_FILE_DONE = "TEMP_FILE_DONE"    # apply the id in the temp file
    CREATE_METADATA_FILE_DONE = "METADATA_FILE_DONE"     # register with the controller


def temp_path(path: str) -> str:
    return path + "-temp"


def _read(path: str, fields: int) -> BrokerIdentity | None:
    try:
        with open(path, encoding="utf-8") as source:
            text = source.read().strip()
    except FileNotFoundError:
        return None
    parts = text.split(_SEPARATOR)
    if len(parts) < fields or not parts[0] or not parts[1]:
        log.error("%s holds %r, not a broker identity; ignored", path, text[:80])
        return None
    try:
        broker_id = int(parts[2])
    except ValueError:
        log.error("%s holds a broker id %r that is not a number; ignored", path, parts[2][:24])
        return None
    code = _SEPARATOR.join(parts[3:]) if fields == 4 else None
    return BrokerIdentity(parts[0], parts[1], broker_id, code)


def read_identity(path: str) -> BrokerIdentity | None:
    """The assigned identity, or None when there is none (or it is unreadable)."""
    return _read(path, 3)


def read_application(path: str) -> BrokerIdentity | None:
    """The identity being applied for (the temp file), or None."""
    return _read(temp_path(path), 4)


def write_identity(path: str, identity: BrokerIdentity) -> None:
    text = _SEPARATOR.join((identity.cluster_name, identity.broker_name,
                            str(identity.broker_id)))
    config_docs.save_file(path, text.encode())


def write_application(path: str, identity: BrokerIdentity) -> None:
    if not identity.register_check_code:
        raise ValueError("an application needs its register check code")
    text = _SEPARATOR.join((identity.cluster_name, identity.broker_name,
                            str(identity.broker_id), identity.register_check_code))
    config_docs.save_file(temp_path(path), text.encode())


def clear_application(path: str) -> None:
    """Delete the temp file (and its backup)."""
    for candidate in (temp_path(path), temp_path(path) + config_docs.BAK_SUFFIX):
        try:
            os.unlink(candidate)
        except FileNotFoundError:
            pass


def register_state(path: str) -> tuple[RegisterState, BrokerIdentity | None]:
    """Where a registration resumes, and the identity read for it (Java's
    ``confirmNowRegisteringState``): the identity file wins over the temp file."""
    identity = read_identity(path)
    if identity is not None:
        return RegisterState.CREATE_METADATA_FILE_DONE, identity
    application = read_application(path)
    if application is not None:
        return RegisterState.CREATE_TEMP_METADATA_FILE_DONE, application
    return RegisterState.INITIAL, None
