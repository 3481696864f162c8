# Log output of every pybroker process: one line format, process names, rate limits per cause.
"""Logging set-up for the ``pybroker`` command and its forked workers.

Every line carries a timestamp (local time, milliseconds), the level, the process name
(``supervisor``, ``appender``, ``remoting-0``, ``namesrv`` ...) and its pid, then the logger::

    2024-05-01 12:00:00.123 WARNING [appender 4242] pybroker.proc.appender: disk full ...

The process name is set once per process with :func:`set_process_name` (forked workers call it
first thing); it is inherited by fork until then.

Rate limit per cause: a flood of one failure (a client that pipelines thousands of bad
requests) must not write hundreds of megabytes of tracebacks. A *cause* is the logger, the
message template (before ``%`` formatting) and the exception type. Each cause may log
``RATE_BURST`` lines per ``RATE_WINDOW_S`` seconds; further lines of that cause are counted and
dropped, and the next line let through after the window says how many were suppressed.
DEBUG lines are never limited (they are off unless asked for).
"""
import logging
import os
import sys
import time

__all__ = ["set_process_name", "process_name", "configure", "RateLimitFilter",
           "LINE_FORMAT"]

LINE_FORMAT = ("%(asctime)s.%(msecs)03d %(levelname)s [%(process_name)s %(process)d] "
               "%(name)s: %(message)s")
_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
RATE_BURST = 10
RATE_WINDOW_S = 60.0
_CAUSES_MAX = 4096            # distinct causes tracked; older ones are forgotten

_process_name = "main"


def set_process_name(name: str) -> None:
    """Name this process in every later log line (e.g. ``appender``, ``remoting-1``)."""
    global _process_name
    _process_name = name


def process_name() -> str:
    """The name set by :func:`set_process_name` (``main`` until then)."""
    return _process_name


class _ProcessNameFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.process_name = _process_name
        return True


class RateLimitFilter(logging.Filter):
    """Let at most ``burst`` records of one cause through per ``window_s`` seconds.

    ``clock``: monotonic seconds (injected by tests).
    """

    def __init__(self, burst: int = RATE_BURST, window_s: float = RATE_WINDOW_S,
                 clock=time.monotonic):
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        # cause -> [window start, records let through in the window, records suppressed]
        self._causes: dict[tuple, list] = {}
        self._pid = os.getpid()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG:
            return True
        if os.getpid() != self._pid:      # a forked child starts with its own counts
            self._causes.clear()
            self._pid = os.getpid()
        exc_type = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] \
            else ""
        cause = (record.name, str(record.msg), exc_type)
        now = self.clock()
        state = self._causes.get(cause)
        if state is None:
            if len(self._causes) >= _CAUSES_MAX:
                self._causes.pop(next(iter(self._causes)))
            state = self._causes[cause] = [now, 0, 0]
        elif now - state[0] >= self.window_s:
            state[0], state[1] = now, 0
        if state[1] >= self.burst:
            state[2] += 1
            return False
        state[1] += 1
        if state[2]:
            record.msg = f"{record.msg} [{state[2]} similar line(s) suppressed in the last " \
                         f"{self.window_s:.0f} s]"
            state[2] = 0
        return True


def configure(level: int = logging.INFO, stream=None, name: str | None = None) -> None:
    """Send the ``pybroker`` loggers to ``stream`` (stderr) in :data:`LINE_FORMAT`, rate
    limited per cause. Idempotent: a second call replaces the handler."""
    if name is not None:
        set_process_name(name)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter(LINE_FORMAT, _DATE_FORMAT))
    handler.addFilter(_ProcessNameFilter())
    handler.addFilter(RateLimitFilter())
    handler.set_name("pybroker-main")
    root = logging.getLogger("pybroker")
    for old in list(root.handlers):
        if old.get_name() == "pybroker-main":
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
