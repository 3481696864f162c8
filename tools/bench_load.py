# Load programs of the side-by-side benchmark: our Java bench classes or Apache's, streamed.
"""The Java load programs and how their output is read while they run.

``LoadTools`` compiles tools/java_bench/*.java against the pinned Java client jars (4.9.8) and
builds JVM command lines for them, or for Apache's own benchmark classes
(``org.apache.rocketmq.example.benchmark.Producer`` / ``BatchProducer`` / ``Consumer``) when
``apache_classes`` names a directory where they were compiled (they are not on Maven Central;
benchmarks/e2e/README.md says how to build them from a source checkout; never commit them).

``run_streaming`` runs a load program and calls ``on_event(name)`` the moment its output says
the measured window opens (``warmup_done``) or closes (``measure_end``), so the broker's
processes are sampled at those instants. Our programs print ``BENCH_MARK <name> <ms>``;
Apache's print a line with the TPS of the last 10 s every 10 s, so there the first such line
opens the window (it ends the tool's own warm-up) and every later line may close it.
"""
import json
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402
import java_rocketmq as jr  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
JAVA_BENCH_DIR = ROOT / "tools" / "java_bench"
PRODUCER_CLASS = "BenchProducer"
CONSUMER_CLASS = "BenchConsumer"
POP_ACK_CLASS = "BenchPopAck"
APACHE_PACKAGE = "org.apache.rocketmq.example.benchmark."
LOAD_TIMEOUT_S = 150.0          # hard bound on one count-bounded load program
MARK_PREFIX = "BENCH_MARK "
RESULT_PREFIX = "BENCH_RESULT "
# "Current Time: ... Send TPS: 123 ..." (Producer, BatchProducer, TransactionProducer) or
# "... TPS: 123 FAIL..." (Consumer), printed every 10 s by Apache's tools; the messages per
# second of a line are its "Send MPS" where there is one (BatchProducer), else its TPS.
# TransactionProducer pads: "Send TPS:  812 ... AVG RT(ms):3.1".
_APACHE_TPS = re.compile(r"Current Time: .*?\bTPS:\s*(\d+)")
_APACHE_MPS = re.compile(r"Send MPS:\s*(\d+)")      # BatchProducer: messages, TPS: requests
_APACHE_AVG_RT = re.compile(r"(?:Average RT|AVG\(S2C\) RT|AVG RT)\(ms\):\s*([0-9.]+)")
# Failure counters of Apache's periodic lines: Producer (totals), BatchProducer (totals),
# TransactionProducer (per period), Consumer 4.9.8 "FAIL" / 5.x "Consume Fail" (per period).
_APACHE_FAILED = re.compile(r"(?:Send Failed|Response Failed|Send Message Failed|\bFAIL|"
                            r"Consume Fail):\s*(\d+)")


def parse_result_line(stdout: str) -> dict:
    """The JSON of the last "BENCH_RESULT {...}" line, or {} when there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return {}


def apache_failures(line: str) -> int:
    """The failures one of Apache's periodic lines reports (sum of its failure counters)."""
    return sum(int(found) for found in _APACHE_FAILED.findall(line))


def apache_tps_lines(stdout: str) -> list[int]:
    """The TPS figures of Apache's periodic lines, in order."""
    return [int((_APACHE_MPS.search(line) or found).group(1)) for line in stdout.splitlines()
            if (found := _APACHE_TPS.search(line))]


class LoadTools:
    """Compiled Java load programs and a client-side harness for their JVM flags."""

    def __init__(self, work_dir: pathlib.Path, install: jr.RocketMQInstall,
                 apache_classes: pathlib.Path | None = None, with_go: bool = False,
                 client5: bool = False):
        """``client5``: also the programs of tools/java_bench/pop5 (5.x client API only)."""
        del with_go      # accepted for callers of the older interface; no Go load here
        self.install = install
        self.client = jr.JavaRocketMQ(work_dir / "client", install=install)
        self.client.write_files()
        sources = sorted(JAVA_BENCH_DIR.glob("*.java"))
        if client5:
            sources += sorted((JAVA_BENCH_DIR / "pop5").glob("*.java"))
        self.classes = jr.compile_java(install, sources, work_dir / "classes")
        self.apache_classes = apache_classes
        if apache_classes is not None and not (pathlib.Path(apache_classes) / "org").is_dir():
            raise jr.HarnessError(f"{apache_classes} holds no compiled org.apache classes")

    def java_argv(self, main_class: str, args: list, heap_mb: int = 256) -> list[str]:
        extra = [self.classes] + ([self.apache_classes] if self.apache_classes else [])
        argv = self.client.client_argv(main_class, args, extra_classpath=extra,
                                       heap_mb=heap_mb)
        # The client harness limits the JIT for short tools; a load generator wants C2, and
        # Apache's scripts run it with the server JVM's G1 (runclass.sh), so do we.
        return [arg for arg in argv if arg not in ("-XX:TieredStopAtLevel=1",
                                                   "-XX:+UseSerialGC")]

    def run_java(self, main_class: str, args: list) -> tuple[dict, jr.JavaRun]:
        """Run one of our programs to completion (count-bounded loads, e.g. a backlog)."""
        run = bb.run_bounded(self.java_argv(main_class, args), LOAD_TIMEOUT_S,
                             cwd=self.client.work_dir)
        return parse_result_line(run.stdout), run


class StreamedRun:
    """Outcome of :func:`run_streaming`: output, exit code (None when stopped), seconds."""

    def __init__(self):
        self.stdout_lines: list[str] = []
        self.stderr_tail = ""
        self.returncode: int | None = None
        self.stopped = False
        self.elapsed_s = 0.0
        self.pid = 0

    @property
    def stdout(self) -> str:
        return "\n".join(self.stdout_lines)


def _watch_stdout(process, run: StreamedRun, on_line: Callable[[str], bool],
                  done: threading.Event) -> None:
    for line in process.stdout:
        line = line.rstrip("\n")
        run.stdout_lines.append(line)
        if on_line(line):
            done.set()
    done.set()


def run_streaming(argv: list[str], timeout_s: float, on_line: Callable[[str], bool],
                  cwd=None, on_start: Callable[[int], None] | None = None) -> StreamedRun:
    """Run argv, feeding each stdout line to ``on_line``; stop it (SIGTERM, then the group's
    SIGKILL) when ``on_line`` returns True or after timeout_s. Registered in bench_brokers.LIVE
    meanwhile. ``on_start(pid)`` runs once the process exists."""
    run = StreamedRun()
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    bb.LIVE.append(process)
    run.pid = process.pid
    stderr_chunks: list[str] = []
    stderr_reader = threading.Thread(target=lambda: stderr_chunks.extend(process.stderr),
                                     daemon=True)
    stderr_reader.start()
    done = threading.Event()
    reader = threading.Thread(target=_watch_stdout, args=(process, run, on_line, done),
                              daemon=True)
    try:
        if on_start is not None:
            on_start(process.pid)
        reader.start()
        done.wait(timeout_s)
        if process.poll() is None:
            run.stopped = True
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    finally:
        bb.stop_process(process, term_timeout_s=5)
        reader.join(timeout=10)
        stderr_reader.join(timeout=10)
    run.returncode = None if run.stopped else process.returncode
    run.stderr_tail = "".join(stderr_chunks)[-2000:]
    run.elapsed_s = time.monotonic() - started
    return run


class WindowEvents:
    """Turns a load program's output into window events (see the module docstring).

    ``on_event(name)`` is called for ``warmup_done`` and ``measure_end``; for Apache's tools
    every periodic line after the first calls ``measure_end`` again, and the run is stopped
    once ``apache_lines_max`` lines came or a line reports 0 TPS (a drained backlog:
    ``drained``). With ``apache_opens_at`` (Apache's Consumer: "Consumer Started.") the line
    starting with it opens the window and every periodic line calls ``measure_end``.
    """

    def __init__(self, on_event: Callable[[str], None], apache: bool,
                 apache_lines_max: int = 0, apache_opens_at: str | None = None):
        self.on_event = on_event
        self.apache = apache
        self.apache_lines_max = apache_lines_max
        self.apache_opens_at = apache_opens_at
        self.drained = False            # stopped at a 0 TPS line
        self.apache_tps: list[int] = []
        self.apache_avg_rt_ms: list[float] = []
        self.apache_failed = 0          # the largest failure count a periodic line reported
        self.events: list[str] = []

    def __call__(self, line: str) -> bool:
        if line.startswith(MARK_PREFIX):
            name = line[len(MARK_PREFIX):].split()[0]
            self.events.append(name)
            self.on_event(name)
            return False
        if not self.apache:
            return False
        if self.apache_opens_at and line.startswith(self.apache_opens_at) \
                and "warmup_done" not in self.events:
            self.events.append("warmup_done")
            self.on_event("warmup_done")
            return False
        found = _APACHE_TPS.search(line)
        if found is None:
            return False
        self.apache_failed = max(self.apache_failed, apache_failures(line))
        found = _APACHE_MPS.search(line) or found
        if self.apache_tps and int(found.group(1)) == 0:
            self.drained = True
            return True        # a drained backlog (Consumer): the window ended a line ago
        self.apache_tps.append(int(found.group(1)))
        rt = _APACHE_AVG_RT.search(line)
        self.apache_avg_rt_ms.append(float(rt.group(1)) if rt else float("nan"))
        first = len(self.apache_tps) == 1 and not self.apache_opens_at
        name = "warmup_done" if first else "measure_end"
        self.events.append(name)
        self.on_event(name)
        return len(self.apache_tps) >= self.apache_lines_max
