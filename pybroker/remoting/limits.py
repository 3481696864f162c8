# The limits of one remoting connection, each enforced by closing the offending connection.
"""Per-connection limits (frame size, ext fields, idle and partial-frame time, write backlog,
requests in progress), read from the broker's remoting settings. Where each is enforced:
:mod:`pybroker.remoting.connection` (module docstring)."""
import dataclasses
from typing import Any

from pybroker.config import RemotingConfig

_REMOTING_DEFAULTS = RemotingConfig()


@dataclasses.dataclass(frozen=True)
class ConnectionLimits:
    """Per-connection limits; every one is enforced by closing the offending connection.

    ``frame_max_bytes``: largest whole frame accepted (Java's 16 MiB). ``ext_fields_max``: ext
    fields in one header. ``idle_timeout_ms``: close after this long with nothing read or
    written; 0 = never (Java's serverChannelMaxIdleTimeSeconds, 120 s).
    ``partial_frame_timeout_ms``: close when a frame has started arriving but is not complete
    after this long (slowloris). ``write_buffer_high_bytes``: unsent bytes above which reading
    from the peer is paused (resumed below a quarter of it). ``write_stall_timeout_ms``: close a
    peer whose reading has been paused this long. ``write_buffer_max_bytes``: close at once when
    unsent bytes exceed this. ``requests_in_progress_max``: handlers of this connection still
    waiting, above which further frames wait (reading paused). ``pause_reading_on_backlog``:
    False for internal links, which keep reading whatever their write backlog.
    """
    frame_max_bytes: int = _REMOTING_DEFAULTS.frame_max_bytes
    ext_fields_max: int = _REMOTING_DEFAULTS.ext_fields_max
    idle_timeout_ms: int = _REMOTING_DEFAULTS.server_channel_max_idle_time_seconds * 1000
    partial_frame_timeout_ms: int = 60_000
    write_buffer_high_bytes: int = 1 << 20
    write_stall_timeout_ms: int = 60_000
    write_buffer_max_bytes: int = 64 << 20
    requests_in_progress_max: int = 1024
    pause_reading_on_backlog: bool = True

    def __post_init__(self):
        checks = (("frame_max_bytes", self.frame_max_bytes, 16, 1 << 31),
                  ("ext_fields_max", self.ext_fields_max, 0, 1 << 20),
                  ("idle_timeout_ms", self.idle_timeout_ms, 0, 1 << 40),
                  ("partial_frame_timeout_ms", self.partial_frame_timeout_ms, 1, 1 << 40),
                  ("write_buffer_high_bytes", self.write_buffer_high_bytes, 4, 1 << 40),
                  ("write_stall_timeout_ms", self.write_stall_timeout_ms, 1, 1 << 40),
                  ("write_buffer_max_bytes", self.write_buffer_max_bytes,
                   self.write_buffer_high_bytes, 1 << 40),
                  ("requests_in_progress_max", self.requests_in_progress_max, 1, 1 << 30))
        for name, value, low, high in checks:
            if not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name}={value!r}: must be an int in [{low}, {high}]")

    @classmethod
    def from_config(cls, remoting: RemotingConfig, *, server: bool = True,
                    **overrides) -> "ConnectionLimits":
        """Limits from the broker's remoting settings (server or client idle time)."""
        idle_seconds = (remoting.server_channel_max_idle_time_seconds if server
                        else remoting.client_channel_max_idle_time_seconds)
        values: dict[str, Any] = dict(frame_max_bytes=remoting.frame_max_bytes,
                      ext_fields_max=remoting.ext_fields_max, idle_timeout_ms=idle_seconds * 1000)
        values.update(overrides)
        return cls(**values)
