# Broker launchers used by tools/bench_side_by_side.py: pybroker and Java RocketMQ, same conf.
"""Start pybroker or Java RocketMQ with one shared broker.conf on 127.0.0.1; measure them.

Per-process figures (CPU, context switches, PSS) are taken by tools/bench_sample.py with each
broker's ``root_pids()`` and ``role_of()``. Every process started here is registered in
``LIVE`` and stopped by :func:`stop_all` (SIGTERM to its process group, SIGKILL after a
deadline); the driver calls it from ``finally``, at interpreter exit and on SIGINT/SIGTERM, so
an interrupted benchmark leaves nothing running.
"""
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import java_rocketmq as jr  # noqa: E402  (tools/ is not a package)

ROOT = pathlib.Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
PYBROKER_READY_LINE = "] boot success"
LIVE: list[subprocess.Popen] = []


def shared_broker_conf(flush_disk_type: str) -> dict:
    """The broker.conf given to BOTH brokers (addresses, ports and paths are added per broker).

    128 MiB CommitLog files keep the disk footprint of a run small for both brokers; every
    other store setting is RocketMQ's default. remotingWorkers is pybroker's (Java ignores it).
    """
    return {
        "brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": "0",
        "brokerRole": "ASYNC_MASTER", "flushDiskType": flush_disk_type,
        "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true",
        "mappedFileSizeCommitLog": str(128 << 20), "diskMaxUsedSpaceRatio": "95",
        "remotingWorkers": "2",
    }


UPDATE_AND_CREATE_TOPIC = 17
GET_ROUTEINFO_BY_TOPIC = 105


_ERROR_LINE = re.compile(r"Error|Exception|error|ERROR|FATAL|fatal|invalid|Invalid|refus|"
                         r"denied|must |not |cannot|unable")


def one_line(text, limit: int = 400) -> str:
    """A failure's text as one line: its first line, and the last line below it that names an
    error (a log tail's exception, a refused setting; with the line after it when it ends in
    a colon), shortened to limit characters."""
    lines = [" ".join(line.split()) for line in str(text).splitlines() if line.strip()]
    if not lines:
        return "no output"
    found = [index for index, line in enumerate(lines) if index and _ERROR_LINE.search(line)]
    cause = ""
    if found:
        index = found[-1]
        cause = lines[index]
        if cause.endswith(":") and index + 1 < len(lines):
            cause += " " + lines[index + 1]
    joined = lines[0] + (f" {cause}" if cause else "")
    return joined if len(joined) <= limit else joined[:limit - 1] + "…"


def remoting_request(port: int, code: int, ext_fields: dict, timeout_s: float = 5.0) -> dict:
    """One JSON-header request to 127.0.0.1:port; returns the response header as a dict."""
    header = json.dumps({"code": code, "language": "JAVA", "version": 373, "opaque": 1,
                         "flag": 0, "extFields": ext_fields}, separators=(",", ":")).encode()
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    with socket.create_connection((jr.LOOPBACK, port), timeout=timeout_s) as sock:
        sock.sendall(frame)
        frame_len, header_word = struct.unpack(">ii", jr._recv_exactly(sock, 8))
        if not 4 <= frame_len <= 16 << 20:
            raise jr.HarnessError(f"bad response frame length {frame_len}")
        rest = jr._recv_exactly(sock, frame_len - 4)
    return json.loads(rest[:header_word & 0xFFFFFF])


def create_topic(broker, topic: str, queue_count: int = 8, timeout_s: float = 30.0) -> None:
    """Create topic on the broker (UPDATE_AND_CREATE_TOPIC) and wait for its route.

    Done before every load so consumers find the route at start instead of at their next
    30 s route poll, and no broker pays for auto-creation inside a measured run.
    """
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queue_count),
              "writeQueueNums": str(queue_count), "perm": "6", "topicFilterType": "SINGLE_TAG",
              "topicSysFlag": "0", "order": "false"}
    broker_port = int(broker.broker_addr.rsplit(":", 1)[1])
    answer = remoting_request(broker_port, UPDATE_AND_CREATE_TOPIC, fields)
    if answer.get("code") != 0:
        raise jr.HarnessError(f"creating {topic} failed: {answer}")
    namesrv_port = int(broker.namesrv_addr.rsplit(":", 1)[1])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if remoting_request(namesrv_port, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})["code"] == 0:
            return
        time.sleep(0.1)
    raise jr.HarnessError(f"no route for {topic} in the NameServer after {timeout_s} s")


def stop_process(process: subprocess.Popen, term_timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the process (its group on timeout: SIGKILL), reap it, drop it from LIVE."""
    if process.poll() is None:
        try:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=term_timeout_s)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)   # leftovers of the group (forked workers)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    if process in LIVE:
        LIVE.remove(process)


def stop_all() -> None:
    """Stop every process this module (or the driver) started and registered in LIVE."""
    for process in list(reversed(LIVE)):
        stop_process(process, term_timeout_s=10)


def spawn(argv: list[str], log_path: pathlib.Path, cwd=None) -> subprocess.Popen:
    """Start argv in its own session with stdout+stderr to log_path; registered in LIVE."""
    with open(log_path, "ab") as log:
        process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    LIVE.append(process)
    return process


def run_bounded(argv: list[str], timeout_s: float, cwd=None) -> jr.JavaRun:
    """Run argv to completion or timeout_s (then stopped); registered in LIVE meanwhile."""
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    LIVE.append(process)
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        stop_process(process, term_timeout_s=5)
        stdout, stderr = process.communicate(timeout=10)
    finally:
        stop_process(process, term_timeout_s=5)   # no-op when it exited; else interrupted
    return jr.JavaRun(None if timed_out else process.returncode, stdout, stderr,
                      time.monotonic() - started, timed_out)


INSTALL_HINT = "python3 -m pip install . (README's install, from the clone)"
# Run by the candidate interpreter from a folder outside any source tree: imports pybroker and
# every compiled extension its package ships a .pyx for, prints one JSON line.
_PROBE = """
import importlib, json, pathlib, sys
try:
    import pybroker, pybroker.cli
    package = pathlib.Path(pybroker.__file__).resolve().parent
    for source in sorted((package / "_fast").rglob("*.pyx")):
        parts = source.relative_to(package / "_fast").with_suffix("").parts
        importlib.import_module(".".join(("pybroker", "_fast") + parts))
except Exception as error:
    print(json.dumps({"error": type(error).__name__ + ": " + str(error)}))
else:
    print(json.dumps({"version": pybroker.__version__, "package": str(package),
                      "python": sys.executable}))
"""
_SOURCE_SUFFIXES = (".py", ".pyx", ".pxd", ".pyi", ".h")


@dataclasses.dataclass(frozen=True)
class PyBrokerInstall:
    """The pybroker the benchmark runs: command prefix, version, package folder, and whether
    that package's sources are this checkout's (``differing``: files that are not)."""
    argv: tuple
    version: str
    package: str
    differing: tuple

    @property
    def matches_checkout(self) -> bool:
        return not self.differing

    def describe(self) -> dict:
        return {"command": " ".join(self.argv), "version": self.version,
                "package": self.package, "matches_checkout": self.matches_checkout,
                "differing_count": len(self.differing),
                "differing_files": list(self.differing[:20])}


def _source_digests(package: pathlib.Path) -> dict:
    return {str(path.relative_to(package)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in package.rglob("*") if path.suffix in _SOURCE_SUFFIXES
            and "__pycache__" not in path.parts and path.is_file()}


def differing_sources(package: pathlib.Path, checkout: pathlib.Path = ROOT / "pybroker") -> list:
    """Source files (.py/.pyx/.pxd/.pyi/.h) that differ between an installed package and the
    checkout's pybroker/ (present in one only, or with other bytes); [] when they match."""
    if package.resolve() == checkout.resolve():
        return []
    mine, theirs = _source_digests(checkout), _source_digests(package)
    return sorted(name for name in mine.keys() | theirs.keys()
                  if mine.get(name) != theirs.get(name))


def _probe(python: str, cwd: str) -> dict:
    try:
        run = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, cwd=cwd,
                             timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"error": f"{python}: {error}"}
    for line in reversed(run.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    return {"error": lines[-1] if lines else f"{python} exited {run.returncode}"}


def _version_answer(argv, cwd: str) -> str | None:
    """None when ``argv --version`` says it is pybroker; else what it said instead."""
    try:
        run = subprocess.run([*argv, "--version"], capture_output=True, text=True, cwd=cwd,
                             timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return str(error)
    if run.returncode == 0 and run.stdout.startswith("pybroker "):
        return None
    lines = [line for line in (run.stderr + run.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {run.returncode}"


def _script_python(script: str) -> str | None:
    """The interpreter of a console script's #! line."""
    try:
        with open(script, "rb") as handle:
            first = handle.readline(512).decode(errors="replace")
    except OSError:
        return None
    return shlex.split(first[2:])[0] if first.startswith("#!") and first[2:].strip() else None


def find_pybroker(command: str | None = None) -> PyBrokerInstall:
    """The pybroker a user installed: ``command`` when given, else ``sys.executable -m
    pybroker``, else the ``pybroker`` on PATH; each checked from a folder outside any source
    tree (pybroker and its compiled extensions import). HarnessError, one line, when none."""
    with tempfile.TemporaryDirectory(prefix="pybroker-probe-") as neutral:
        candidates = []
        if command:
            argv = tuple(shlex.split(command))
            python = _script_python(shutil.which(argv[0]) or argv[0]) \
                if argv[1:2] != ("-m",) else argv[0]
            candidates.append((argv, python or argv[0]))
        else:
            candidates.append(((sys.executable, "-m", "pybroker"), sys.executable))
            script = shutil.which("pybroker")
            python = _script_python(script) if script else None
            if script and python:
                candidates.append(((script,), python))
        reasons = []
        for argv, python in candidates:
            found = _probe(python, neutral)
            if "error" not in found:
                found["error"] = _version_answer(argv, neutral)
            if not found["error"]:
                differing = differing_sources(pathlib.Path(found["package"]))
                return PyBrokerInstall(argv, found["version"], found["package"],
                                       tuple(differing))
            reasons.append(f"{' '.join(argv)}: {found['error']}")
    raise jr.HarnessError(f"no runnable pybroker ({'; '.join(reasons)}): install it with "
                          f"{INSTALL_HINT}" if not command else
                          f"--pybroker {command} does not run pybroker ({'; '.join(reasons)})")


_FOUND: list[PyBrokerInstall] = []


def installed_pybroker() -> PyBrokerInstall:
    """find_pybroker() once per process (or what use_pybroker() set)."""
    if not _FOUND:
        _FOUND.append(find_pybroker())
    return _FOUND[0]


def use_pybroker(install: PyBrokerInstall) -> None:
    _FOUND[:] = [install]


def registered(namesrv_port: int, broker_addr: str) -> bool:
    """Whether the NameServer on namesrv_port lists broker_addr in its cluster info."""
    body = jr.remoting_call(namesrv_port, jr.GET_BROKER_CLUSTER_INFO)
    return bool(body) and broker_addr.encode() in body


def read_log(path: pathlib.Path) -> str:
    """A log file's text so far ("" when it is not there yet)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


class LoopbackAddresses:
    """namesrv_addr and broker_addr of a broker on 127.0.0.1 from its namesrv_port and
    broker_port (what the driver's measure() reads of a broker)."""
    namesrv_port: int
    broker_port: int

    @property
    def namesrv_addr(self) -> str:
        return f"{jr.LOOPBACK}:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"{jr.LOOPBACK}:{self.broker_port}"


class PyBroker(LoopbackAddresses):
    """``pybroker standalone`` (NameServer + broker) on free ports under work_dir, run as the
    installed pybroker (:func:`installed_pybroker`) from work_dir, outside the source tree.

    ``wrapper``: argv prefix (the profile mode runs the broker under py-spy).
    """
    name = "pybroker"

    def __init__(self, work_dir: pathlib.Path, conf: dict, wrapper=(),
                 namesrv_port: int | None = None):
        self.work_dir = pathlib.Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.namesrv_port = namesrv_port or jr.free_port()
        self.broker_port = jr.free_port(offsets=(-2, 0, 1))
        store = self.work_dir / "store"
        # A free gRPC port unless the scenario sets one: standalone's default 8081 is taken
        # by any other broker on the box (a shared box runs several).
        self.conf = dict({"grpcServerPort": str(jr.free_port())} | dict(conf),
                         storePathRootDir=str(store),
                         storePathCommitLog=str(store / "commitlog"), brokerIP1=jr.LOOPBACK,
                         listenPort=str(self.broker_port), namesrvAddr=self.namesrv_addr)
        self.conf_path = self.work_dir / "broker.conf"
        self.log_path = self.work_dir / "pybroker.log"
        self.wrapper = list(wrapper)
        self.process: subprocess.Popen | None = None

    def start(self) -> "PyBroker":
        jr.write_properties(self.conf_path, self.conf)
        argv = [*self.wrapper, *installed_pybroker().argv, "standalone",
                "-c", str(self.conf_path), "--namesrv-port", str(self.namesrv_port)]
        self.process = spawn(argv, self.log_path, cwd=self.work_dir)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise jr.HarnessError(f"pybroker exited ({self.process.returncode}):\n"
                                      + self.log_tail())
            if PYBROKER_READY_LINE in self.log_text() and self._registered():
                return self
            time.sleep(0.1)
        self.stop()
        raise jr.HarnessError("pybroker not ready in time:\n" + self.log_tail())

    def exited(self) -> str | None:
        """None while the broker runs; else how it ended, one line."""
        if self.process is None or self.process.poll() is None:
            return None
        return one_line(f"pybroker exited ({self.process.returncode}) during the load\n"
                        + self.log_tail())

    def _registered(self) -> bool:
        return registered(self.namesrv_port, self.broker_addr)

    def log_text(self) -> str:
        return read_log(self.log_path)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]

    def role_of(self, process: psutil.Process) -> str:
        """supervisor (the root), a worker's role from its ``pb-<role>`` name, or namesrv."""
        if process.pid in self.root_pids():
            return "supervisor"
        name = process.name()
        return name[3:] if name.startswith("pb-") else "namesrv"

    def root_pids(self) -> list[int]:
        """The pids whose process trees are the broker (py-spy, when wrapping, is excluded)."""
        if self.process is None:
            return []
        if not self.wrapper:
            return [self.process.pid]
        try:
            return [child.pid for child in psutil.Process(self.process.pid).children()]
        except psutil.Error:
            return []

    def stop(self) -> None:
        """SIGTERM the supervisor (it stops workers and NameServer in order), then the group."""
        if self.process is None:
            return
        if self.wrapper:
            for pid in self.root_pids():
                try:
                    os.kill(pid, signal.SIGTERM)    # the broker under py-spy
                except ProcessLookupError:
                    pass
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)   # py-spy writes its output, exits
            except subprocess.TimeoutExpired:
                pass
        stop_process(self.process)
        self.process = None


class JavaBroker:
    """Java NameServer + broker (tools/java_rocketmq.py) with the shared broker.conf; named
    ``java-<version>``."""

    def __init__(self, work_dir: pathlib.Path, conf: dict, install: jr.RocketMQInstall,
                 heap_mb: int = 1024, namesrv_port: int | None = None):
        self.name = f"java-{install.version}"
        self.work_dir = pathlib.Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.conf_path = self.work_dir / "shared-broker.conf"
        store = self.work_dir / "store"
        jr.write_properties(self.conf_path, dict(conf, storePathRootDir=str(store),
                                                 storePathCommitLog=str(store / "commitlog")))
        ports = {"free_ports": True} if namesrv_port is None else {
            "namesrv_port": namesrv_port, "broker_port": jr.free_port(offsets=(-2, 0, 1))}
        self.harness = jr.JavaRocketMQ(self.work_dir, install=install, **ports,
                                       broker_conf=self.conf_path, broker_heap_mb=heap_mb,
                                       ready_timeout_s=READY_TIMEOUT_S)

    @property
    def namesrv_addr(self) -> str:
        return self.harness.namesrv_addr

    @property
    def broker_addr(self) -> str:
        return self.harness.broker_addr

    def start(self) -> "JavaBroker":
        self.harness.start()
        return self

    def root_pids(self) -> list[int]:
        return [process.pid for process in self.harness.processes.values()]

    def role_of(self, process: psutil.Process) -> str:
        """namesrv or broker (the harness's names of its two JVMs)."""
        for role, started in self.harness.processes.items():
            if started.pid == process.pid:
                return role
        return "jvm-child"

    def exited(self) -> str | None:
        """None while NameServer and broker run; else which ended, one line."""
        for role, process in self.harness.processes.items():
            if process.poll() is not None:
                return one_line(f"{self.name} {role} exited ({process.returncode}) during the "
                                f"load\n" + self.log_tail())
        return None

    def log_tail(self, chars: int = 3000) -> str:
        path = self.harness.logs_dir / "broker.out"
        try:
            return path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGKILL, not a graceful stop: a benchmark's store is thrown away after its load, and
        the JVMs' shutdown took 10 s (4.9.8) and 20 s (5.3.3) of every load's wall time
        (measured 2026-12-06), which the whole matrix's 40 minutes cannot carry. The figures
        are taken before the stop, so they do not change."""
        for role in list(self.harness.processes):
            try:
                self.harness.kill(role)
            except ProcessLookupError:
                pass
        self.harness.stop()
