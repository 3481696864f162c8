# The "floor" broker kind of tools/bench_side_by_side.py: the cheapest server a send load can hit.
"""A floor for RocketMQ remoting sends (issue #28): on a 2-core box the load program shares the
cores with the broker, so what ANY broker can reach at 8/32/64 threads is bounded by what the
load program reaches against the cheapest possible server. This is that server, run inside the
side-by-side matrix (``--brokers pybroker,java-4.9.8,floor``) so it is measured interleaved with
the brokers under the same harness.

What it is: the real pybroker NameServer process (``pybroker namesrv``), plus
``tools/remoting_floor/floor_server.c`` (one thread, epoll, non-blocking sockets; built with
``gcc -O2`` into the work folder at start) that answers every SEND_MESSAGE, SEND_MESSAGE_V2 and
SEND_BATCH_MESSAGE with SEND_OK at once (a well-formed SendMessageResponseHeader: msgId,
queueId, queueOffset counting per topic and queue) in the header encoding the request came in;
HEART_BEAT and UNREGISTER_CLIENT with SUCCESS; UPDATE_AND_CREATE_TOPIC with SUCCESS, after
which :class:`Registrar` (in the harness's process, with pybroker's own
:class:`~pybroker.broker.registration.NamesrvRegistration`) registers the topic with the
NameServer, as a broker does at once and every registerNameServerPeriod (30 s); every other
code with REQUEST_CODE_NOT_SUPPORTED. Oneway requests get no answer; a frame that cannot be read
closes its connection only.

What it is not: a broker. It stores nothing, keeps no message, checks nothing a broker checks
(topic existence, permissions, sizes, properties), serves no consumer, POP, timer, transaction
or HA load (the matrix skips the floor there), and the broker never starts it: it is a
measuring instrument and lives in tools/ only. Its figures are the load program's ceiling on
this box, never a target a broker could reach: a broker has to store.
"""
import asyncio
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402
import java_rocketmq as jr  # noqa: E402

from pybroker.broker.registration import NamesrvRegistration  # noqa: E402
from pybroker.config import load_broker_config  # noqa: E402
from pybroker.protocol.command import FRAME_MAX_BYTES_DEFAULT  # noqa: E402
from pybroker.store.config_docs import TopicConfig, TopicConfigDocument  # noqa: E402

SOURCE = pathlib.Path(__file__).resolve().parent / "remoting_floor" / "floor_server.c"
BINARY_NAME = "floor_server"
NAMESRV_READY_LINE = "The Name Server boot success"
READY_TIMEOUT_S = 60.0
SERVER_ROLE = "floor-server"


class FloorError(jr.HarnessError):
    """The floor could not be built or started (one line)."""


def build(work_dir: pathlib.Path) -> pathlib.Path:
    """Compile floor_server.c with gcc -O2 into work_dir; the binary's path."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise FloorError("the floor broker needs gcc (apt-get install gcc)")
    work_dir.mkdir(parents=True, exist_ok=True)
    binary = work_dir / BINARY_NAME
    run = subprocess.run([gcc, "-O2", "-Wall", "-Werror", "-o", str(binary), str(SOURCE)],
                         capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise FloorError(f"gcc could not build {SOURCE.name}: {bb.one_line(run.stderr)}")
    return binary


def start_server(binary: pathlib.Path, port: int = 0,
                 frame_max_bytes: int = FRAME_MAX_BYTES_DEFAULT) -> tuple[subprocess.Popen, int]:
    """Start the C server (its own session, stdout a pipe) on 127.0.0.1:port (0: any free);
    (process, the port it listens on) once it says so."""
    process = subprocess.Popen([str(binary), str(port), str(frame_max_bytes)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    first = process.stdout.readline().split()
    if first[:1] != ["listening"]:
        process.kill()
        process.wait()
        raise FloorError(f"{BINARY_NAME} did not start (exit {process.returncode})")
    return process, int(first[1])


def parse_topic_line(line: str) -> TopicConfig | None:
    """The TopicConfig of a "topic NAME READ WRITE PERM" line of the C server, else None."""
    parts = line.split()
    if len(parts) != 5 or parts[0] != "topic":
        return None
    try:
        read, write, perm = (int(part) for part in parts[2:])
    except ValueError:
        return None
    return TopicConfig(parts[1], read_queue_nums=read, write_queue_nums=write, perm=perm)


class Registrar:
    """Keeps the floor registered with its NameServer with pybroker's own registration: the
    topics the C server reports, registered at once and every registerNameServerPeriod.

    Runs in the harness's process (two threads: an event loop, and a reader of the server's
    stdout), so the floor's measured processes stay the C server and the NameServer."""

    def __init__(self, broker_port: int, namesrv_addr: str, conf: dict, server_stdout):
        self.config = load_broker_config(None, dict(
            conf, brokerIP1=jr.LOOPBACK, listenPort=str(broker_port), namesrvAddr=namesrv_addr))
        self.document = TopicConfigDocument()
        self.registration = NamesrvRegistration(self.config, lambda: self.document)
        self.server_stdout = server_stdout
        self.loop = asyncio.new_event_loop()
        self._task: asyncio.Task | None = None
        self._threads = [threading.Thread(target=self._run_loop, daemon=True,
                                          name="floor-registrar"),
                         threading.Thread(target=self._read_topics, daemon=True,
                                          name="floor-topics")]

    def start(self) -> "Registrar":
        self._task = self.loop.create_task(self._keep_registered())
        for thread in self._threads:
            thread.start()
        return self

    async def _keep_registered(self) -> None:
        """As a broker: register once at start, then on every change and every period."""
        await self.registration.register_all()
        await self.registration.run()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        finally:
            self.registration.close()
            self.loop.run_until_complete(asyncio.sleep(0))
            self.loop.close()

    def _read_topics(self) -> None:
        for line in self.server_stdout:
            topic = parse_topic_line(line)
            if topic is not None and not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self._add_topic, topic)

    def _add_topic(self, topic: TopicConfig) -> None:
        """On the loop: the topic joins the table, whose version moves; register soon."""
        self.document.topic_config_table[topic.topic_name] = topic
        self.document.data_version.next_version()
        self.registration.topics_changed()

    def stop(self) -> None:
        """End the registration; the reader ends with the server's stdout."""
        if self._task is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._task.cancel)
        for thread in self._threads:
            thread.join(timeout=10)


class FloorBroker(bb.LoopbackAddresses):
    """The ``floor`` kind of the matrix: a pybroker NameServer process, the C server and the
    :class:`Registrar`; started and sampled like bench_brokers' PyBroker and JavaBroker
    (``root_pids`` are the C server and the NameServer)."""
    name = "floor"

    def __init__(self, work_dir: pathlib.Path, conf: dict, binary: pathlib.Path,
                 pybroker_argv=None):
        self.work_dir = pathlib.Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.conf = conf
        self.binary = binary
        self.pybroker_argv = list(pybroker_argv or bb.installed_pybroker().argv)
        self.namesrv_port = jr.free_port()
        self.broker_port = 0
        self.namesrv_log = self.work_dir / "namesrv.log"
        self.namesrv: subprocess.Popen | None = None
        self.server: subprocess.Popen | None = None
        self.registrar: Registrar | None = None

    def start(self) -> "FloorBroker":
        conf_path = self.work_dir / "namesrv.conf"
        jr.write_properties(conf_path, {"listenPort": self.namesrv_port,
                                        "kvConfigPath": self.work_dir / "kvConfig.json"})
        self.namesrv = bb.spawn([*self.pybroker_argv, "namesrv", "-c", str(conf_path)],
                                self.namesrv_log, cwd=self.work_dir)
        try:
            self._wait(lambda: NAMESRV_READY_LINE in bb.read_log(self.namesrv_log), "NameServer")
            self.server, self.broker_port = start_server(self.binary)
            bb.LIVE.append(self.server)
            self.registrar = Registrar(self.broker_port, self.namesrv_addr, self.conf,
                                       self.server.stdout).start()
            self._wait(self._registered, "registration")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            gone = self.exited()
            if gone:
                raise FloorError(f"floor: {gone}")
            if ready():
                return
            time.sleep(0.05)
        raise FloorError(f"floor: no {what} within {READY_TIMEOUT_S:.0f} s\n{self.log_tail()}")

    def _registered(self) -> bool:
        return bb.registered(self.namesrv_port, self.broker_addr)

    def log_tail(self, chars: int = 3000) -> str:
        return bb.read_log(self.namesrv_log)[-chars:]

    def root_pids(self) -> list[int]:
        return [process.pid for process in (self.server, self.namesrv) if process is not None]

    def role_of(self, process: psutil.Process) -> str:
        """floor-server (the C server) or namesrv."""
        return SERVER_ROLE if self.server is not None and process.pid == self.server.pid \
            else "namesrv"

    def exited(self) -> str | None:
        """None while the C server and the NameServer run; else which ended, one line."""
        for role, process in ((SERVER_ROLE, self.server), ("namesrv", self.namesrv)):
            if process is not None and process.poll() is not None:
                return bb.one_line(f"floor {role} exited ({process.returncode})\n"
                                   + self.log_tail())
        return None

    def stop(self) -> None:
        """The C server first (its stdout ends, so the registrar's reader does), the
        registrar, then the NameServer."""
        if self.server is not None:
            bb.stop_process(self.server, term_timeout_s=10)
        if self.registrar is not None:
            self.registrar.stop()
            self.registrar = None
        if self.namesrv is not None:
            bb.stop_process(self.namesrv, term_timeout_s=10)
        if self.server is not None and self.server.stdout is not None:
            self.server.stdout.close()
        self.server = self.namesrv = None
