# Progress lines for the long steps of a test session: peer installs, builds, slow fixtures.
"""One terminal line per long step (``[stage] what ... 12.3 s``), shown even while pytest
captures test output, so a run that downloads jars or builds the Go client says so.

tests/conftest.py calls :func:`attach` with the session's config; without it (a script
importing tests.peers) the lines go to stderr. In a pytest-xdist worker, whose terminal output
goes nowhere, each step is one whole line on stderr when it ends, naming the worker
(``[stage gw1] what ... 12.3 s``): the workers' lines do not cut into each other.
"""
import contextlib
import sys
import time

_reporter = None
_capture = None
_worker = ""            # the xdist worker's id ("gw1"), empty in a plain pytest process
_muted = False


def attach(config) -> None:
    """Write through this pytest session's terminal, around its output capture."""
    global _reporter, _capture, _worker
    _capture = config.pluginmanager.get_plugin("capturemanager")
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        _worker = workerinput.get("workerid", "worker")
        _reporter = None
    else:
        _reporter = config.pluginmanager.get_plugin("terminalreporter")


@contextlib.contextmanager
def muted():
    """No progress lines inside the block (a step another worker has already shown)."""
    global _muted
    before, _muted = _muted, True
    try:
        yield
    finally:
        _muted = before


def _write(text: str, end_line: bool) -> None:
    if _muted:
        return
    suspended = _capture.global_and_fixture_disabled() if _capture is not None \
        else contextlib.nullcontext()
    with suspended:
        if _reporter is None:
            sys.stderr.write(text + ("\n" if end_line else ""))
            sys.stderr.flush()
        elif end_line:
            _reporter.write(text + "\n", flush=True)
        else:
            # Start on a line of its own, also in the middle of a row of -q dots.
            writer = getattr(_reporter, "_tw", None)
            if writer is not None and writer.width_of_current_line:
                _reporter.write("\n")
            _reporter.write(text, flush=True)


def line(text: str) -> None:
    """A whole progress line."""
    if _worker:
        _write(f"[stage {_worker}] {text}", True)
        return
    _write(f"[stage] {text}", False)
    _write("", True)


@contextlib.contextmanager
def stage(text: str):
    """``[stage] text ...`` now, then `` 12.3 s`` (or `` failed after 12.3 s``) on the same
    line when the block ends. The block may append words to the yielded list; they are
    printed before the time (``... built, 40.4 s``)."""
    head = f"[stage {_worker}] {text} ..." if _worker else f"[stage] {text} ..."
    if not _worker:
        _write(head, False)
        head = ""
    notes: list[str] = []
    started = time.monotonic()
    try:
        yield notes
    except BaseException:
        _write(f"{head} failed after {time.monotonic() - started:.1f} s", True)
        raise
    _write(f"{head} " + ", ".join([*notes, f"{time.monotonic() - started:.1f} s"]), True)
