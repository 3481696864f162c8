"""Log lines carry time, level and process, and a flood of one cause is cut to a burst.

Method: configure pybroker's logging onto a StringIO and check the line format; drive
RateLimitFilter with an injected clock through bursts, windows and suppressed counts.
"""
import io
import logging
import re

from pybroker import logs

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                  r"\[(?P<name>[a-z0-9-]+) (?P<pid>\d+)\] (?P<logger>[a-z_.]+): (?P<text>.*)$")


def _record(message: str, level=logging.ERROR, exc_info=None, args=()) -> logging.LogRecord:
    return logging.LogRecord("pybroker.test", level, __file__, 1, message, args, exc_info)


def test_line_format_names_time_level_and_process():
    stream = io.StringIO()
    logs.configure(stream=stream, name="appender")
    try:
        logging.getLogger("pybroker.proc.appender").warning("disk %s", "full")
    finally:
        logs.configure(name="main")
    found = LINE.match(stream.getvalue().strip())
    assert found, stream.getvalue()
    assert found["name"] == "appender" and found["logger"] == "pybroker.proc.appender"
    assert found["text"] == "disk full"


def test_a_flood_of_one_cause_is_cut_to_a_burst_per_window():
    now = [0.0]
    limit = logs.RateLimitFilter(burst=3, window_s=10.0, clock=lambda: now[0])
    passed = [limit.filter(_record("request %d failed", args=(n,))) for n in range(100)]
    assert passed.count(True) == 3
    # Another cause has its own budget.
    assert limit.filter(_record("other cause"))
    now[0] = 10.5
    first_after = _record("request %d failed", args=(101,))
    assert limit.filter(first_after)
    assert "97 similar line(s) suppressed" in first_after.getMessage()
    assert first_after.getMessage().startswith("request 101 failed")


def test_the_exception_type_is_part_of_the_cause_and_debug_is_never_cut():
    limit = logs.RateLimitFilter(burst=1, window_s=60.0, clock=lambda: 0.0)
    try:
        raise KeyError("x")
    except KeyError as error:
        key_error = (KeyError, error, None)
    assert limit.filter(_record("failed", exc_info=key_error))
    assert not limit.filter(_record("failed", exc_info=key_error))
    assert limit.filter(_record("failed", exc_info=(ValueError, ValueError("y"), None)))
    assert all(limit.filter(_record("noise", level=logging.DEBUG)) for _ in range(50))
