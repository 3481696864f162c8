# pybroker exception hierarchy.
"""Exceptions raised by pybroker.

Three kinds of failure are kept apart (see docs/architecture/layers.md):

* operating errors from peers (bad frames, bad headers) -> :class:`ProtocolError` and friends,
  turned into a RocketMQ response code or a closed connection at the edge;
* expected store outcomes -> status enums in :mod:`pybroker.store.status`, not exceptions;
* invariant violations and durability failures -> :class:`StoreCorruptError` /
  :class:`DurabilityError`, which stop the worker (fail-stop).
"""


class BrokerError(Exception):
    """Base class of every exception pybroker defines."""


class ProtocolError(BrokerError):
    """Bytes from a peer that cannot be framed or decoded.

    The connection that sent them is no longer trustworthy and is closed.
    """


class HeaderError(BrokerError):
    """A decoded request whose custom header is missing a field or has a bad value.

    Carries the RocketMQ response ``code`` and ``remark`` to answer with.
    """

    def __init__(self, remark: str, code: int = 1):
        super().__init__(remark)
        self.remark = remark
        self.code = code


class ConfigError(BrokerError):
    """A configuration key has an invalid value; start-up stops with this message."""


class StartupError(BrokerError):
    """Something the process needs before it serves is unusable (a store directory it may not
    write, a port in use). The message is one line naming the setting, its value and the fix;
    the command prints it without a traceback."""


class StoreCorruptError(BrokerError):
    """Data in the written region of a store file does not verify (invariant violation)."""


class DurabilityError(BrokerError):
    """A flush (msync/fdatasync) or write to the store failed; the worker must stop."""


class ServiceFailedError(BrokerError):
    """A periodic service failed too many rounds in a row (pybroker/tasks.py); its owner
    stops as after an invariant violation."""


# Errors no round of a service retries: the process that meets one fail-stops (style.md §8.6).
FAIL_STOP_ERRORS = (AssertionError, StoreCorruptError, DurabilityError)
