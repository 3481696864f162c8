# Harness for the real Java RocketMQ from Maven Central: install, start/stop, mqadmin, run a class.
"""Java RocketMQ reference peer for compat tests and side-by-side benchmarks.

Library::

    install = RocketMQInstall("4.9.8")          # ~/.cache/pybroker/rocketmq-4.9.8 by default
    install.install()                           # mvn copy-dependencies; skipped when lib/ complete
    with JavaRocketMQ(tmp_path, install=install, free_ports=True) as rmq:
        print(rmq.mqadmin("clusterList", "-n", rmq.namesrv_addr))

CLI::

    python tools/java_rocketmq.py install [--version 4.9.8] [--cache-dir DIR]
    python tools/java_rocketmq.py start --work-dir DIR [--free-ports | --namesrv-port P
                                        --broker-port Q] [--broker-conf FILE]
    python tools/java_rocketmq.py status|stop --work-dir DIR
    python tools/java_rocketmq.py mqadmin --work-dir DIR -- clusterList -n 127.0.0.1:9876
    python tools/java_rocketmq.py run-class --work-dir DIR --timeout-s 30 -- CLASS ARGS...
    python tools/java_rocketmq.py controller -c conf/controller/controller.conf [--work-dir DIR]

Every address is 127.0.0.1. Every process started here is stopped by ``stop()`` (SIGTERM, then
SIGKILL after a deadline), on exceptions and Ctrl-C via the context manager, and at interpreter
exit; pids are recorded in ``<work_dir>/pids.json`` so a run killed with -9 can be cleaned later.
"""
import argparse
import atexit
import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

VERSIONS = ("4.9.8", "5.3.3")       # the test peers (tests/peers.py installs each)
# Installable for benchmarks only: the newest broker Maven Central serves. Its rocketmq-namesrv,
# -client, -srvutil, -filter, -auth and -tools 5.5.1 are not there (404), so pom-5.5.1.xml pins
# those to 5.3.3, and the NameServer runs from the 5.3.3 install (NAMESRV_VERSION).
BENCH_VERSIONS = ("5.5.1",)
NAMESRV_VERSION = {"5.5.1": "5.3.3"}
DEFAULT_VERSION = "4.9.8"
LOOPBACK = "127.0.0.1"
TOOLS_DIR = pathlib.Path(__file__).resolve().parent
POM_DIR = TOOLS_DIR / "javarmq"
LOGBACK_DIR = POM_DIR / "logback"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies"
COMPLETE_MARKER = ".complete.json"
NAMESRV_CLASS = "org.apache.rocketmq.namesrv.NamesrvStartup"
CONTROLLER_CLASS = "org.apache.rocketmq.controller.ControllerStartup"
BROKER_CLASS = "org.apache.rocketmq.broker.BrokerStartup"
MQADMIN_CLASS = "org.apache.rocketmq.tools.command.MQAdminStartup"
BOOT_SUCCESS = "boot success"
# Reflective paths of 4.9.x store/remoting on JDK 9+ (real-clients.md §1.5).
JDK9_FLAGS = (
    "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
)
SERVER_FLAGS = ("-server", "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow",
                "-XX:-UseLargePages", "-XX:+ExitOnOutOfMemoryError")


class HarnessError(RuntimeError):
    """The Java peer could not be installed, started or run within its deadline."""


def java_available() -> str | None:
    """Why the Java peer cannot run here (missing java/javac/mvn), or None when it can."""
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    return f"not on PATH: {', '.join(missing)}" if missing else None


def default_cache_dir(version: str) -> pathlib.Path:
    """~/.cache/pybroker/rocketmq-<version>."""
    return pathlib.Path.home() / ".cache" / "pybroker" / f"rocketmq-{version}"


def _load_ports():
    """pybroker/_testbase/ports.py loaded by path: the one port finder, also before pybroker is
    installed (``.ci/run`` installs the jars first)."""
    name = "_pybroker_testbase_ports"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, TOOLS_DIR.parent / "pybroker" / "_testbase" / "ports.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_ports = _load_ports()


def _ports_free(ports) -> bool:
    return _ports.bindable(ports)


def free_port(offsets=(0,)) -> int:
    """A port P such that every P+offset is free on 127.0.0.1 now (pybroker/_testbase/ports.py:
    outside the ephemeral range, a slice per xdist worker).

    A broker needs offsets (-2, 0, 1): its VIP channel listenPort-2 and HA port listenPort+1.
    """
    try:
        return _ports.free_port(offsets)
    except RuntimeError as error:
        raise HarnessError(str(error)) from error


def wait_for_port(port: int, timeout_s: float) -> bool:
    """True once 127.0.0.1:port accepts a TCP connection, False at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((LOOPBACK, port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.1)
    return False


GET_BROKER_CLUSTER_INFO = 106  # request code; the answer's body lists registered brokers


def remoting_call(port: int, code: int, timeout_s: float = 3.0) -> bytes | None:
    """Send one JSON-header request without fields to 127.0.0.1:port; return the response body.

    None on any socket error or malformed answer (callers poll until a deadline).
    """
    header = json.dumps({"code": code, "language": "JAVA", "version": 0, "opaque": 1,
                         "flag": 0, "extFields": {}}, separators=(",", ":")).encode()
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout_s) as sock:
            sock.sendall(frame)
            prefix = _recv_exactly(sock, 8)
            frame_len, header_word = struct.unpack(">ii", prefix)
            if not 4 <= frame_len <= 16 * 1024 * 1024:
                return None
            rest = _recv_exactly(sock, frame_len - 4)
    except (OSError, ValueError):
        return None
    return rest[header_word & 0xFFFFFF:]


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ValueError("connection closed early")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


@dataclasses.dataclass
class JavaRun:
    """Outcome of one JVM run: exit code (None when killed at its timeout), output, seconds."""
    returncode: int | None
    stdout: str
    stderr: str
    elapsed_s: float
    timed_out: bool


def stop_process(process: subprocess.Popen, term_timeout_s: float) -> None:
    """SIGTERM the process group, SIGKILL it after term_timeout_s, reap it."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=term_timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)


def run_java(argv: list[str], timeout_s: float, cwd=None) -> JavaRun:
    """Run a JVM command line to completion or timeout_s (then SIGTERM, SIGKILL); never hangs."""
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        stop_process(process, term_timeout_s=5)
        stdout, stderr = process.communicate(timeout=10)
        timed_out = True
    except BaseException:
        stop_process(process, term_timeout_s=5)
        raise
    return JavaRun(None if timed_out else process.returncode, stdout, stderr,
                   time.monotonic() - started, timed_out)


class MavenLib:
    """The runtime jars of one pinned pom (pom_source) copied from Maven Central into
    <cache_dir>/lib once; a later install with the same pom and every jar there does nothing."""

    def __init__(self, pom_source: pathlib.Path, cache_dir: pathlib.Path, what: str,
                 install_hint: str):
        self.pom_source = pom_source
        self.cache_dir = cache_dir
        self.lib_dir = cache_dir / "lib"
        self.what = what                     # for messages: "RocketMQ 5.3.3"
        self.install_hint = install_hint     # the command that installs it

    def prerequisites(self) -> list["MavenLib"]:
        """Other installs this one needs (installed first, complete together)."""
        return []

    def is_complete(self) -> bool:
        """True when lib/ holds every jar the last successful install listed, for this pom (and
        every prerequisite is complete too)."""
        if not all(other.is_complete() for other in self.prerequisites()):
            return False
        marker = self.lib_dir / COMPLETE_MARKER
        try:
            recorded = json.loads(marker.read_text())
        except (OSError, ValueError):
            return False
        if recorded.get("pom") != self.pom_source.read_text():
            return False
        return all((self.lib_dir / name).is_file() for name in recorded.get("jars", ()))

    def jar_names(self) -> list[str]:
        return sorted(path.name for path in self.lib_dir.glob("*.jar"))

    def install(self, timeout_s: float = 1800) -> float:
        """Copy the pinned jars into lib/ with Maven; returns seconds spent (0.0 when skipped)."""
        if self.is_complete():
            return 0.0
        if shutil.which("mvn") is None:
            raise HarnessError("mvn is not on PATH")
        started = time.monotonic()
        for other in self.prerequisites():
            other.install(timeout_s)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        pom = self.cache_dir / "pom.xml"
        shutil.copyfile(self.pom_source, pom)
        staging = self.cache_dir / "lib.partial"
        shutil.rmtree(staging, ignore_errors=True)
        argv = ["mvn", "-q", "-B", "-f", str(pom), DEPENDENCY_PLUGIN,
                f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
        run = run_java(argv, timeout_s)
        if run.returncode != 0:
            raise HarnessError(f"maven failed (timed out: {run.timed_out}):\n"
                               f"{run.stdout[-4000:]}\n{run.stderr[-2000:]}")
        shutil.rmtree(self.lib_dir, ignore_errors=True)
        staging.rename(self.lib_dir)
        marker = {"pom": self.pom_source.read_text(), "jars": self.jar_names()}
        (self.lib_dir / COMPLETE_MARKER).write_text(json.dumps(marker))
        return time.monotonic() - started

    def lib_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.lib_dir.glob("*.jar"))

    def classpath(self, extra=()) -> str:
        return os.pathsep.join([str(self.lib_dir / "*"), *map(str, extra)])

    def require(self) -> None:
        if not self.is_complete():
            raise HarnessError(f"{self.what} is not installed in {self.lib_dir}; "
                               f"run: {self.install_hint}")


class RocketMQInstall(MavenLib):
    """One pinned Java RocketMQ version's jars in <cache_dir>/lib (from Maven Central)."""

    def __init__(self, version: str = DEFAULT_VERSION, cache_dir=None):
        if version not in VERSIONS + BENCH_VERSIONS:
            raise ValueError(f"version {version!r} not in {VERSIONS + BENCH_VERSIONS}")
        self.version = version
        super().__init__(POM_DIR / f"pom-{version}.xml",
                         pathlib.Path(cache_dir) if cache_dir else default_cache_dir(version),
                         f"RocketMQ {version}",
                         f"python tools/java_rocketmq.py install --version {version}")

    @property
    def namesrv_install(self) -> "RocketMQInstall":
        """The install whose jars run the NameServer: this one, or NAMESRV_VERSION's (in its
        default cache directory) for a broker whose NameServer Maven Central does not serve."""
        paired = NAMESRV_VERSION.get(self.version)
        return self if paired is None else RocketMQInstall(paired)

    def prerequisites(self) -> list[MavenLib]:
        return [] if self.namesrv_install is self else [self.namesrv_install]

    def server_versions(self) -> dict:
        """What really runs, from the jar names: {"broker": "4.9.7", "namesrv": "4.9.7",
        "store": "4.9.8", "client": "4.9.8"} (None for a jar that is not there)."""
        found = {}
        for module, install in (("broker", self), ("namesrv", self.namesrv_install),
                                ("store", self), ("remoting", self), ("client", self)):
            jars = sorted(install.lib_dir.glob(f"rocketmq-{module}-*.jar"))
            found[module] = jars[0].name[len(f"rocketmq-{module}-"):-len(".jar")] \
                if jars else None
        return found

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


def broker_conf_test_profile(store_dir, namesrv_addr: str, broker_port: int, major: int,
                     overrides=None) -> dict:
    """The test profile of real-clients.md §1.4 on 127.0.0.1, as an ordered dict of properties.

    Small files (1 MiB CommitLog, 300-entry ConsumeQueue files), so a captured store stays tiny;
    maxMessageSize is lowered to 512 KiB since a CommitLog file must hold the largest message.
    """
    store_dir = pathlib.Path(store_dir)
    conf = {
        "brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": "0",
        "brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH",
        "namesrvAddr": namesrv_addr, "brokerIP1": LOOPBACK, "listenPort": str(broker_port),
        "storePathRootDir": str(store_dir), "storePathCommitLog": str(store_dir / "commitlog"),
        "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true",
        "enablePropertyFilter": "true",
        "mappedFileSizeCommitLog": str(1024 * 1024), "maxMessageSize": str(512 * 1024),
        "mappedFileSizeConsumeQueue": str(300 * 20),
        "maxHashSlotNum": "1000", "maxIndexNum": "4000",
        "fileReservedTime": "1", "diskMaxUsedSpaceRatio": "95",
    }
    if major >= 5:
        conf.update(bindAddress=LOOPBACK, diskSpaceWarningLevelRatio="98",
                    diskSpaceCleanForciblyRatio="95")
    conf.update(overrides or {})
    return conf


def write_properties(path, properties: dict) -> None:
    lines = [f"{key}={value}" for key, value in properties.items()]
    pathlib.Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_properties(path) -> dict:
    properties = {}
    for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            properties[key.strip()] = value.strip()
    return properties


def pid_alive_with_marker(pid: int, marker: str) -> bool:
    """True when pid is running and its command line mentions marker (guards pid reuse)."""
    try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker.encode() in cmdline


def _kill_recorded(pid: int, marker: str, term_timeout_s: float) -> bool:
    """SIGTERM a recorded pid (then SIGKILL); True if it was alive."""
    if not pid_alive_with_marker(pid, marker):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + term_timeout_s
    while time.monotonic() < deadline:
        if not pid_alive_with_marker(pid, marker):
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def cleanup_stale(work_dir, term_timeout_s: float = 20) -> list[int]:
    """Stop processes recorded in <work_dir>/pids.json by an earlier run; returns their pids."""
    pid_file = pathlib.Path(work_dir) / "pids.json"
    try:
        recorded = json.loads(pid_file.read_text())
    except (OSError, ValueError):
        return []
    stopped = [entry["pid"] for entry in reversed(recorded.get("processes", []))
               if _kill_recorded(entry["pid"], recorded["marker"], term_timeout_s)]
    pid_file.unlink(missing_ok=True)
    return stopped


_JAVA_MAJOR: list[int] = []


def java_major() -> int:
    """The default `java`'s feature version (8, 11, 17, ...), probed once."""
    if not _JAVA_MAJOR:
        run = run_java(["java", "-XshowSettings:properties", "-version"], timeout_s=30)
        major = 8
        for line in run.stderr.splitlines():
            if "java.specification.version" in line:
                value = line.split("=", 1)[1].strip()
                major = int(value.split(".")[1]) if value.startswith("1.") else int(value)
        _JAVA_MAJOR.append(major)
    return _JAVA_MAJOR[0]


def compile_java(install: MavenLib, sources, out_dir, timeout_s: float = 120) -> str:
    """javac the given .java files against lib/ into out_dir; returns out_dir as a string."""
    install.require()
    pathlib.Path(out_dir).mkdir(parents=True, exist_ok=True)
    argv = ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(out_dir),
            "-cp", install.classpath(), *map(str, sources)]
    run = run_java(argv, timeout_s)
    if run.returncode != 0:
        raise HarnessError(f"javac failed:\n{run.stdout}\n{run.stderr}")
    return str(out_dir)


def jvm_flags(heap_mb: int, home_dir, logs_dir, marker: str,
              min_heap_mb: int | None = None) -> list[str]:
    """Heap, the JDK 9+ opens, ROCKETMQ_HOME and user.home (home_dir: 5.x writes its logs under
    user.home/logs), the log directory, and the marker that identifies the process (pids.json)."""
    flags = [f"-Xms{min_heap_mb or heap_mb}m", f"-Xmx{heap_mb}m"]
    if java_major() >= 9:
        flags += JDK9_FLAGS
    # ROCKETMQ_HOME as a system property: same effect as the env var, no env juggling.
    flags += [f"-Drocketmq.home.dir={home_dir}", f"-Duser.home={home_dir}",
              f"-Drmq.logs.dir={logs_dir}", marker]
    return flags


def tail(path: pathlib.Path, line_count: int = 30) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return f"({path} missing)"
    return f"--- {path} (last {line_count} lines)\n" + "\n".join(lines[-line_count:])


class JavaRocketMQ:
    """A Java NameServer + broker on 127.0.0.1 under work_dir (context manager: start/stop).

    Heaps (MiB): NameServer namesrv_heap_mb (default 256), broker broker_heap_mb (default 512,
    same for direct memory). Ports: namesrv_port/broker_port, or random free ones with
    free_ports=True. broker_namesrv_addr lets the broker register through a capture proxy.
    """

    def __init__(self, work_dir, install: RocketMQInstall | None = None,
                 version: str = DEFAULT_VERSION, cache_dir=None, namesrv_port: int = 9876,
                 broker_port: int = 10911, free_ports: bool = False, broker_conf=None,
                 broker_overrides=None, broker_namesrv_addr: str | None = None,
                 namesrv_heap_mb: int = 256, broker_heap_mb: int = 512,
                 ready_timeout_s: float = 120, stop_timeout_s: float = 30,
                 own_namesrv: bool = True):
        self.install = install or RocketMQInstall(version, cache_dir)
        self.work_dir = pathlib.Path(work_dir).resolve()
        if free_ports:
            namesrv_port = free_port()
            broker_port = free_port(offsets=(-2, 0, 1))
        self.namesrv_port = namesrv_port
        self.broker_port = broker_port
        self.broker_conf_source = broker_conf
        self.broker_overrides = dict(broker_overrides or {})
        self.broker_namesrv_addr = broker_namesrv_addr or self.namesrv_addr
        self.namesrv_heap_mb = namesrv_heap_mb
        self.broker_heap_mb = broker_heap_mb
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        # False: only a broker, registering with a NameServer already on namesrv_port (HA
        # tests pair a Java broker with pybroker ones under one NameServer).
        self.own_namesrv = own_namesrv
        self.home_dir = self.work_dir / "home"
        self.conf_dir = self.work_dir / "conf"
        self.logs_dir = self.work_dir / "logs"
        self.store_dir = self.work_dir / "store"
        self.marker = f"-Dpybroker.harness={self.work_dir}"
        self.processes: dict[str, subprocess.Popen] = {}
        self.ready_s: dict[str, float] = {}

    @property
    def namesrv_addr(self) -> str:
        return f"{LOOPBACK}:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"{LOOPBACK}:{self.broker_port}"

    @property
    def major(self) -> int:
        return self.install.major

    def _jvm_common(self, heap_mb: int, min_heap_mb: int | None = None) -> list[str]:
        return jvm_flags(heap_mb, self.home_dir, self.logs_dir, self.marker, min_heap_mb)

    def _logging_flags(self, role: str) -> list[str]:
        """4.x reads home/conf/logback_<role>.xml itself; 5.x picks a bundled config by name."""
        if self.major >= 5:
            return [f"-Drmq.logback.configurationFile=rmq.{role}.logback.xml"]
        if role == "client":
            return [f"-Dlogback.configurationFile={self.home_dir / 'conf' / 'logback_tools.xml'}"]
        return []

    def write_files(self) -> None:
        """Create ROCKETMQ_HOME, logback configs (4.x), namesrv.conf and broker.conf."""
        for directory in (self.home_dir / "conf", self.conf_dir, self.logs_dir, self.store_dir):
            directory.mkdir(parents=True, exist_ok=True)
        for source in LOGBACK_DIR.glob("logback_*.xml"):
            shutil.copyfile(source, self.home_dir / "conf" / source.name)
        namesrv = {"listenPort": str(self.namesrv_port)}
        if self.major >= 5:
            namesrv["bindAddress"] = LOOPBACK
        write_properties(self.conf_dir / "namesrv.conf", namesrv)
        write_properties(self.conf_dir / "broker.conf", self._broker_properties())

    def _broker_properties(self) -> dict:
        conf = broker_conf_test_profile(self.store_dir, self.broker_namesrv_addr,
                                        self.broker_port, self.major)
        if self.broker_conf_source is not None:
            given = read_properties(self.broker_conf_source)
            conf = {key: value for key, value in conf.items()
                    if key in ("storePathRootDir", "storePathCommitLog")}
            conf.update(given)
            if self.major >= 5:
                conf["bindAddress"] = LOOPBACK
        # Addresses and ports always belong to the harness (loopback only, free ports).
        conf.update(namesrvAddr=self.broker_namesrv_addr, brokerIP1=LOOPBACK,
                    listenPort=str(self.broker_port))
        conf.update(self.broker_overrides)
        return conf

    def namesrv_argv(self) -> list[str]:
        return ["java", *SERVER_FLAGS, *self._jvm_common(self.namesrv_heap_mb),
                *self._logging_flags("namesrv"), "-cp", self.install.namesrv_install.classpath(),
                NAMESRV_CLASS, "-c", str(self.conf_dir / "namesrv.conf")]

    def broker_argv(self) -> list[str]:
        heap_mb = self.broker_heap_mb
        flags = [*self._jvm_common(heap_mb), f"-XX:MaxDirectMemorySize={heap_mb}m"]
        if self.major < 5:
            # 4.9.x reads the disk ratios only from these JVM properties (real-clients.md §1.4).
            flags += ["-Drocketmq.broker.diskSpaceWarningLevelRatio=0.98",
                      "-Drocketmq.broker.diskSpaceCleanForciblyRatio=0.95"]
        return ["java", *SERVER_FLAGS, *flags, *self._logging_flags("broker"),
                "-cp", self.install.classpath(), BROKER_CLASS,
                "-c", str(self.conf_dir / "broker.conf")]

    def _record_pids(self) -> None:
        state = {"marker": self.marker, "version": self.install.version,
                 "cache_dir": str(self.install.cache_dir), "namesrv_addr": self.namesrv_addr,
                 "broker_addr": self.broker_addr,
                 "processes": [{"role": role, "pid": process.pid}
                               for role, process in self.processes.items()]}
        (self.work_dir / "pids.json").write_text(json.dumps(state, indent=1))

    def _spawn(self, role: str, argv: list[str], port: int) -> None:
        out_path = self.logs_dir / f"{role}.out"
        started = time.monotonic()
        with open(out_path, "wb") as out:
            process = subprocess.Popen(argv, cwd=self.work_dir, stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.processes[role] = process
        self._record_pids()
        self._wait_ready(role, process, out_path, port, started)
        self.ready_s[role] = time.monotonic() - started

    def _wait_ready(self, role, process, out_path, port, started) -> None:
        """Wait for the boot-success line and the port answering; fail loudly at the deadline."""
        deadline = started + self.ready_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise HarnessError(f"{role} exited with {process.returncode} before ready\n"
                                   + tail(out_path) + "\n" + tail(self.logs_dir / f"{role}.log"))
            text = out_path.read_text(encoding="utf-8", errors="replace")
            if BOOT_SUCCESS in text and wait_for_port(port, timeout_s=1.0):
                return
            time.sleep(0.1)
        raise HarnessError(f"{role} not ready after {self.ready_timeout_s} s\n" + tail(out_path)
                           + "\n" + tail(self.logs_dir / f"{role}.log"))

    def _wait_registered(self) -> None:
        """Wait until the NameServer lists the broker (5.x registers ~10 s after boot)."""
        started = time.monotonic()
        deadline = started + self.ready_timeout_s
        needle = f"{self.broker_addr}".encode()
        while time.monotonic() < deadline:
            body = remoting_call(self.namesrv_port, GET_BROKER_CLUSTER_INFO)
            if body and needle in body:
                self.ready_s["registered"] = time.monotonic() - started
                return
            if self.processes["broker"].poll() is not None:
                break
            time.sleep(0.2)
        raise HarnessError(f"broker {self.broker_addr} not registered in the NameServer "
                           f"within {self.ready_timeout_s} s\n"
                           + tail(self.logs_dir / "broker.out"))

    def start(self, detach: bool = False) -> "JavaRocketMQ":
        """Start NameServer then broker and wait until both are ready (bounded)."""
        self.install.require()
        cleanup_stale(self.work_dir, self.stop_timeout_s)
        self.write_files()
        if not detach:
            atexit.register(self.stop)
        try:
            if self.own_namesrv:
                self._spawn("namesrv", self.namesrv_argv(), self.namesrv_port)
            self._spawn("broker", self.broker_argv(), self.broker_port)
            self._wait_registered()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> dict:
        """Stop broker then NameServer (SIGTERM, SIGKILL after stop_timeout_s); exit codes."""
        codes = {}
        for role in ("broker", "namesrv"):
            process = self.processes.pop(role, None)
            if process is not None:
                stop_process(process, self.stop_timeout_s)
                codes[role] = process.returncode
        if self.processes:
            for process in self.processes.values():
                stop_process(process, self.stop_timeout_s)
            self.processes.clear()
        (self.work_dir / "pids.json").unlink(missing_ok=True)
        atexit.unregister(self.stop)
        return codes

    def kill(self, role: str, sig: int = signal.SIGKILL) -> None:
        """Send sig to one process (crash tests); the process stays recorded until stop()."""
        os.killpg(self.processes[role].pid, sig)

    def status(self) -> dict:
        return {role: {"pid": process.pid, "alive": process.poll() is None}
                for role, process in self.processes.items()}

    def __enter__(self) -> "JavaRocketMQ":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def client_argv(self, main_class: str, args=(), extra_classpath=(), heap_mb: int = 256,
                    system_properties=None) -> list[str]:
        """A client-side JVM command line (mqadmin, benchmark or capture classes)."""
        props = [f"-D{key}={value}" for key, value in (system_properties or {}).items()]
        return ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                *self._jvm_common(heap_mb, min_heap_mb=64), *self._logging_flags("client"),
                *props, "-cp", self.install.classpath(extra_classpath), main_class,
                *map(str, args)]

    def run_class(self, main_class: str, args=(), timeout_s: float = 60, extra_classpath=(),
                  heap_mb: int = 256, system_properties=None) -> JavaRun:
        """Run a Java main class with lib/ (+ extra_classpath) until exit or timeout_s."""
        self.install.require()
        if not self.home_dir.exists():
            self.write_files()
        argv = self.client_argv(main_class, args, extra_classpath, heap_mb, system_properties)
        return run_java(argv, timeout_s, cwd=self.work_dir)

    def printed_defaults(self, role: str = "broker", timeout_s: float = 120) -> dict:
        """Run ``BrokerStartup -p`` (role "broker") or ``NamesrvStartup -p`` (role "namesrv")
        without a config file: {key: [values]} of every setting Java prints with its defaults
        (5.x prints some keys twice, e.g. listenPort of two config objects)."""
        self.install.require()
        self.write_files()
        main_class = BROKER_CLASS if role == "broker" else NAMESRV_CLASS
        argv = ["java", *self._jvm_common(256), *self._logging_flags(role), "-cp",
                self.install.classpath(), main_class, "-p"]
        run = run_java(argv, timeout_s, cwd=self.work_dir)
        if run.returncode != 0:
            raise HarnessError(f"{main_class} -p failed (exit {run.returncode}, timed out "
                               f"{run.timed_out}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        # 4.x prints through its logger (logs/<role>.log), 5.x to stdout.
        log_path = self.logs_dir / f"{role}.log"
        text = run.stdout + (log_path.read_text(encoding="utf-8", errors="replace")
                             if log_path.exists() else "")
        printed: dict[str, list[str]] = {}
        for line in text.splitlines():
            found = re.search(r" - ([A-Za-z][A-Za-z0-9_.]*)=(.*)$", line)
            if found:
                printed.setdefault(found.group(1), []).append(found.group(2))
        return printed

    def mqadmin(self, *args, timeout_s: float = 60) -> str:
        """Run mqadmin with args (adds -n <namesrv> unless given); returns its stdout."""
        args = list(map(str, args))
        if "-n" not in args and args and args[0] != "help":
            args += ["-n", self.namesrv_addr]
        run = self.run_class(MQADMIN_CLASS, args, timeout_s=timeout_s)
        if run.returncode != 0:
            raise HarnessError(f"mqadmin {args} failed (exit {run.returncode}, timed out "
                               f"{run.timed_out}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        return run.stdout


class JavaController(JavaRocketMQ):
    """Apache's controller (5.x, ``ControllerStartup``) on 127.0.0.1:``port`` for
    controller-mode tests; brokers are started separately (pybroker ones, or
    :class:`JavaRocketMQ` with ``own_namesrv=False`` and the controller keys). A one-node
    DLedger group, or with ``peers`` (every member's port, ``port`` among them) member
    ``n<index>`` of a larger one. ``overrides``: controller.conf keys."""

    def __init__(self, work_dir, install: RocketMQInstall | None = None, port: int | None = None,
                 heap_mb: int = 256, overrides=None, ready_timeout_s: float = 120,
                 stop_timeout_s: float = 30, peers: list[int] | None = None):
        super().__init__(work_dir, install=install or RocketMQInstall("5.3.3"),
                         ready_timeout_s=ready_timeout_s, stop_timeout_s=stop_timeout_s,
                         own_namesrv=False)
        if self.major < 5:
            raise HarnessError("the controller is RocketMQ 5.x")
        # rocketmq-controller comes with rocketmq-namesrv (a NameServer can embed it).
        self.port = port or free_port()
        self.peers = list(peers) if peers else [self.port]
        self.heap_mb = heap_mb
        self.overrides = dict(overrides or {})

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def controller_properties(self) -> dict:
        # DLedger's peer address is the controller's own remoting port (they share a server).
        conf = {"controllerDLegerGroup": "group1",
                "controllerDLegerPeers": ";".join(f"n{index}-{LOOPBACK}:{port}"
                                                  for index, port in enumerate(self.peers)),
                "controllerDLegerSelfId": f"n{self.peers.index(self.port)}",
                "controllerStorePath": str(self.work_dir / "controller-store"),
                "enableElectUncleanMaster": "false", "notifyBrokerRoleChanged": "true"}
        conf.update(self.overrides)
        return conf

    def start(self, detach: bool = False) -> "JavaController":
        self.install.require()
        cleanup_stale(self.work_dir, self.stop_timeout_s)
        self.write_files()
        write_properties(self.conf_dir / "controller.conf", self.controller_properties())
        if not detach:
            atexit.register(self.stop)
        argv = ["java", *SERVER_FLAGS, *self._jvm_common(self.heap_mb),
                *self._logging_flags("controller"), "-cp", self.install.classpath(),
                CONTROLLER_CLASS, "-c", str(self.conf_dir / "controller.conf")]
        try:
            self._spawn("controller", argv, self.port)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> dict:
        process = self.processes.pop("controller", None)
        codes = {}
        if process is not None:
            stop_process(process, self.stop_timeout_s)
            codes["controller"] = process.returncode
        codes.update(super().stop())
        return codes


def controller_broker_overrides(controller_addr: str, **extra) -> dict:
    """broker.conf keys of a Java broker in controller mode (Java's quick-start profile on
    127.0.0.1: the controller assigns the id, the role is decided by the controller)."""
    conf = {"enableControllerMode": "true", "controllerAddr": controller_addr,
            "brokerId": "-1", "brokerRole": "SLAVE", "brokerIP2": LOOPBACK}
    conf.update({key: str(value) for key, value in extra.items()})
    return conf


def _harness_from_state(args) -> JavaRocketMQ:
    """A JavaRocketMQ for an existing work dir (ports/version from pids.json when present)."""
    state = {}
    try:
        state = json.loads((pathlib.Path(args.work_dir) / "pids.json").read_text())
    except (OSError, ValueError):
        pass
    version = state.get("version", args.version)
    cache_dir = state.get("cache_dir", args.cache_dir)
    namesrv_port = int(state.get("namesrv_addr", f":{args.namesrv_port}").rsplit(":", 1)[1])
    broker_port = int(state.get("broker_addr", f":{args.broker_port}").rsplit(":", 1)[1])
    return JavaRocketMQ(args.work_dir, RocketMQInstall(version, cache_dir),
                        namesrv_port=namesrv_port, broker_port=broker_port)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="mqadmin/run-class: pass their arguments after --")
    parser.add_argument("command", choices=("install", "start", "stop", "status", "mqadmin",
                                            "run-class", "controller"))
    parser.add_argument("--version", default=DEFAULT_VERSION, choices=VERSIONS + BENCH_VERSIONS)
    parser.add_argument("--cache-dir", default=None, help="default ~/.cache/pybroker/rocketmq-V")
    parser.add_argument("--work-dir", default=None, help="home, conf, store, logs, pids.json")
    parser.add_argument("--namesrv-port", type=int, default=9876)
    parser.add_argument("--broker-port", type=int, default=10911)
    parser.add_argument("--free-ports", action="store_true", help="pick free ports at run time")
    parser.add_argument("--broker-conf", default=None, help="base broker.conf (else test profile)")
    parser.add_argument("--broker-heap-mb", type=int, default=512)
    parser.add_argument("--timeout-s", type=float, default=120)
    parser.add_argument("--extra-classpath", action="append", default=[])
    parser.add_argument("-c", "--controller-conf", default=None,
                        help="controller: a controller.conf (Apache's keys); runs until Ctrl-C")
    return parser


def _command_controller(args) -> int:
    """Apache's controller (5.3.3) in the foreground with the given controller.conf: its port
    is the one of its own entry in controllerDLegerPeers; stopped by Ctrl-C or SIGTERM."""
    if not args.controller_conf:
        raise SystemExit("controller needs -c controller.conf")
    conf = read_properties(args.controller_conf)
    peers = dict(peer.split("-", 1) for peer in conf["controllerDLegerPeers"].split(";"))
    port = int(peers[conf["controllerDLegerSelfId"]].rsplit(":", 1)[1])
    if not os.path.isabs(conf.get("controllerStorePath", "/")):
        conf["controllerStorePath"] = os.path.abspath(conf["controllerStorePath"])
    install = RocketMQInstall("5.3.3", args.cache_dir)
    install.install()
    controller = JavaController(args.work_dir or "pybroker-controller", install, port=port,
                                overrides=conf, ready_timeout_s=args.timeout_s)
    stopped = []
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: stopped.append(True))
    controller.start()
    sys.stdout.write(f"The controller boot success: {controller.address} (logs in "
                     f"{controller.logs_dir})\n")
    sys.stdout.flush()
    try:
        while not stopped and controller.processes["controller"].poll() is None:
            time.sleep(0.2)
    finally:
        controller.stop()
    return 0


def _command_install(args) -> int:
    install = RocketMQInstall(args.version, args.cache_dir)
    seconds = install.install(timeout_s=max(args.timeout_s, 1800))
    sys.stdout.write(json.dumps({"lib_dir": str(install.lib_dir), "install_s": round(seconds, 1),
                                 "jars": len(install.jar_names()),
                                 "lib_mib": round(install.lib_bytes() / 2**20, 1)}) + "\n")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    # Everything after "--" goes to mqadmin / the Java class untouched.
    args, rest = _parser().parse_args(argv[:split]), argv[split + 1:]
    if args.command == "install":
        return _command_install(args)
    if args.command == "controller":
        return _command_controller(args)
    if args.work_dir is None:
        raise SystemExit("--work-dir is required for " + args.command)
    if args.command == "stop":
        sys.stdout.write(json.dumps({"stopped": cleanup_stale(args.work_dir)}) + "\n")
        return 0
    if args.command == "start":
        harness = JavaRocketMQ(args.work_dir, RocketMQInstall(args.version, args.cache_dir),
                               namesrv_port=args.namesrv_port, broker_port=args.broker_port,
                               free_ports=args.free_ports, broker_conf=args.broker_conf,
                               broker_heap_mb=args.broker_heap_mb, ready_timeout_s=args.timeout_s)
        harness.start(detach=True)
        sys.stdout.write(json.dumps({"namesrv_addr": harness.namesrv_addr,
                                     "broker_addr": harness.broker_addr,
                                     "ready_s": harness.ready_s, **harness.status()}) + "\n")
        return 0
    harness = _harness_from_state(args)
    if args.command == "status":
        state_path = harness.work_dir / "pids.json"
        state = json.loads(state_path.read_text()) if state_path.exists() else {"processes": []}
        for entry in state["processes"]:
            entry["alive"] = pid_alive_with_marker(entry["pid"], state["marker"])
        sys.stdout.write(json.dumps(state) + "\n")
        return 0 if state["processes"] and all(e["alive"] for e in state["processes"]) else 1
    if args.command == "mqadmin":
        sys.stdout.write(harness.mqadmin(*rest, timeout_s=args.timeout_s))
        return 0
    run = harness.run_class(rest[0], rest[1:], timeout_s=args.timeout_s,
                            extra_classpath=args.extra_classpath)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    return 124 if run.timed_out else run.returncode


if __name__ == "__main__":
    sys.exit(main())
