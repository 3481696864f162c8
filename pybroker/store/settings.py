# Store settings as the data-plane workers read them (interim: becomes the declared schema).
"""Store settings by snake_case name, with Java's defaults for what a settings object lacks."""
from pybroker.store.message_store import StoreSettings

__all__ = ["store_setting", "is_sync_flush"]

_DEFAULTS = StoreSettings()
# Settings of the flush services that StoreSettings does not carry (Java's defaults).
_EXTRA_DEFAULTS = {"flush_interval_commit_log": 500, "flush_commit_log_least_pages": 4,
                   "flush_commit_log_thorough_interval": 10_000,
                   "flush_interval_consume_queue": 1000, "flush_consume_queue_least_pages": 2,
                   "flush_consume_queue_thorough_interval": 60_000, "sync_flush_timeout": 5000}


def store_setting(settings, name: str):
    """A store setting by snake_case name; a missing attribute takes Java's default."""
    if hasattr(settings, name):
        return getattr(settings, name)
    if name in _EXTRA_DEFAULTS:
        return _EXTRA_DEFAULTS[name]
    return getattr(_DEFAULTS, name)


def is_sync_flush(settings) -> bool:
    """``flushDiskType`` is SYNC_FLUSH."""
    flush_disk_type = store_setting(settings, "flush_disk_type")
    return str(getattr(flush_disk_type, "value", flush_disk_type)) == "SYNC_FLUSH"
