# Launch pybroker NameServers and master/slave brokers as subprocesses (HA tests and tools).
"""Real processes on free 127.0.0.1 ports, stores in temp directories.

* :class:`NameServerProcess` - ``python -m pybroker namesrv``.
* :class:`BrokerProcess` - ``python -m pybroker broker -c broker.conf`` for one master or slave;
  ``start()`` waits for the boot line, ``stop()`` is SIGTERM, ``kill()`` is ``kill -9`` of its
  whole process group, ``start()`` again restarts on the same store and ports.
* :class:`HACluster` - one NameServer and ``groups`` master/slave sets ``broker-a``,
  ``broker-b``, ... (``slaves_per_group`` slaves each), any role; a context manager that kills
  everything it started on exit. ``java_slave``/``java_master`` members come from the Java
  harness (tools/java_rocketmq.py) and are added by the tests that need them.

Every broker gets the HA test profile: small CommitLog files so that replication rolls files,
``haSendHeartbeatInterval`` 1 s and ``haHousekeepingInterval`` 5 s so that faults show in
seconds, not tens of seconds.
"""
import os
import signal
import subprocess
import sys
import time

from pybroker._testbase.cluster import TEST_PROFILE, free_port, kill_process_group, read_log
from pybroker.store.control_block import ControlBlock

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
BROKER_READY_LINE = "] boot success"
NAMESRV_READY_LINE = "The Name Server boot success"

HA_TEST_PROFILE = dict(TEST_PROFILE, mappedFileSizeCommitLog=str(1024 * 1024),
                       maxMessageSize=str(256 * 1024), haSendHeartbeatInterval="1000",
                       haHousekeepingInterval="5000")


class _Process:
    """A pybroker subprocess with its own log file and process group."""

    ready_line = ""

    def __init__(self, work_dir, argv_tail: list[str]):
        self.work_dir = str(work_dir)
        os.makedirs(self.work_dir, exist_ok=True)
        self.log_path = os.path.join(self.work_dir, "pybroker.log")
        self.argv_tail = argv_tail
        self.process: subprocess.Popen | None = None
        # e.g. ["ip", "netns", "exec", "ns1"]: run the process in a network namespace.
        self.command_prefix: list[str] = []

    def log_text(self) -> str:
        return read_log(self.log_path)

    def start(self, wait: bool = True):
        offset = len(self.log_text())
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([*self.command_prefix, sys.executable, "-m",
                                             "pybroker", *self.argv_tail],
                                            stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        if wait:
            self.wait_log(self.ready_line, READY_TIMEOUT_S, offset)
        return self

    def wait_log(self, needle: str, timeout_s: float, offset: int = 0) -> None:
        """Wait until ``needle`` appears in the log after ``offset``; RuntimeError (with the
        log tail) when the process exits or the deadline passes."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.log_text()[offset:]:
                return
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.argv_tail} exited with {self.process.returncode}:\n"
                                   f"{self.log_text()[-4000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"{needle!r} not logged within {timeout_s} s by {self.argv_tail}:\n"
                           f"{self.log_text()[-4000:]}")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int:
        """SIGTERM and wait; the exit status (SIGKILL after the deadline)."""
        process = self.process
        if process is None or process.poll() is not None:
            return process.returncode if process else 0
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"{self.argv_tail} did not stop in {STOP_TIMEOUT_S} s:\n"
                               f"{self.log_text()[-4000:]}") from None

    def kill(self) -> None:
        """``kill -9`` of the whole process group."""
        kill_process_group(self.process)


class NameServerProcess(_Process):
    ready_line = NAMESRV_READY_LINE

    def __init__(self, work_dir, host: str = "127.0.0.1", overrides: dict | None = None):
        """``overrides``: more namesrv.conf keys (aclEnable, ...)."""
        self.port = free_port()
        self.host = host
        conf = os.path.join(str(work_dir), "namesrv.conf")
        os.makedirs(str(work_dir), exist_ok=True)
        with open(conf, "w", encoding="utf-8") as out:
            out.write(f"listenPort={self.port}\n"
                      f"kvConfigPath={os.path.join(str(work_dir), 'kvConfig.json')}\n")
            out.writelines(f"{key}={value}\n" for key, value in (overrides or {}).items())
        super().__init__(work_dir, ["namesrv", "-c", conf, "--listen-address", host])

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def namesrv_port(self) -> int:      # the Java harness's name for it
        return self.port


class BrokerProcess(_Process):
    """One pybroker broker; ``overrides`` are broker.conf keys over HA_TEST_PROFILE."""

    ready_line = BROKER_READY_LINE

    def __init__(self, work_dir, namesrv_addr: str, overrides: dict | None = None,
                 port: int | None = None):
        self.port = port or free_port((-2, 0, 1))
        self.store_dir = os.path.join(str(work_dir), "store")
        values = dict(HA_TEST_PROFILE, listenPort=str(self.port), storePathRootDir=self.store_dir,
                      namesrvAddr=namesrv_addr)
        values.update(overrides or {})
        self.values = values
        os.makedirs(str(work_dir), exist_ok=True)
        self.conf_path = os.path.join(str(work_dir), "broker.conf")
        with open(self.conf_path, "w", encoding="utf-8") as out:
            out.writelines(f"{key}={value}\n" for key, value in values.items())
        super().__init__(work_dir, ["broker", "-c", self.conf_path])

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ha_address(self) -> str:
        return f"127.0.0.1:{int(self.values.get('haListenPort', self.port + 1))}"

    @property
    def commitlog_dir(self) -> str:
        return os.path.join(self.store_dir, "commitlog")

    def published(self, field: str) -> int:
        """A position from the broker's control block (-1 while there is none)."""
        try:
            with ControlBlock(os.path.join(self.store_dir, "run", "control"),
                              create=False) as block:
                return block.load(field)
        except (FileNotFoundError, ValueError):
            return -1

    def wait_slaves(self, count: int, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until ``count`` slaves are connected to this master's HA port."""
        deadline = time.monotonic() + timeout_s
        while self.published("ha_slaves_connected") != count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} slave(s) not connected to {self.address} within "
                                   f"{timeout_s} s:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)

    def supervisor_children(self) -> dict[str, int]:
        """{process name (pb-ha, pb-appender, ...): pid} of the running broker's workers."""
        import psutil
        if self.process is None or self.process.poll() is not None:
            return {}
        names = {}
        for child in psutil.Process(self.process.pid).children():
            try:
                names[child.name()] = child.pid
            except psutil.NoSuchProcess:
                continue              # exited while listed (a generation ending)
        return names


class HACluster:
    """One NameServer and master/slave groups (see the module docstring).

    ``roles``: the master's brokerRole; ``overrides``: keys for every broker;
    ``groups``: broker names ``broker-a``, ``broker-b``, ...
    """

    def __init__(self, work_dir, groups: int = 1, slaves_per_group: int = 1,
                 role: str = "ASYNC_MASTER", overrides: dict | None = None):
        self.work_dir = str(work_dir)
        self.namesrv = NameServerProcess(os.path.join(self.work_dir, "namesrv"))
        self.masters: list[BrokerProcess] = []
        self.slaves: list[list[BrokerProcess]] = []
        for group in range(groups):
            name = f"broker-{chr(ord('a') + group)}"
            common = dict(overrides or {}, brokerName=name)
            self.masters.append(BrokerProcess(
                os.path.join(self.work_dir, f"{name}-m"), self.namesrv.address,
                dict(common, brokerRole=role, brokerId="0")))
            self.slaves.append([BrokerProcess(
                os.path.join(self.work_dir, f"{name}-s{index + 1}"), self.namesrv.address,
                dict(common, brokerRole="SLAVE", brokerId=str(index + 1)))
                for index in range(slaves_per_group)])

    @property
    def brokers(self) -> list[BrokerProcess]:
        return self.masters + [slave for group in self.slaves for slave in group]

    def start(self) -> "HACluster":
        """NameServer, then the masters, then the slaves (a slave learns its master's HA
        address from its registration answer, so the master registers first)."""
        self.namesrv.start()
        for group in (self.masters, [slave for slaves in self.slaves for slave in slaves]):
            for broker in group:
                broker.start(wait=False)
            for broker in group:
                broker.wait_log(BROKER_READY_LINE, READY_TIMEOUT_S)
        for master, slaves in zip(self.masters, self.slaves, strict=True):
            master.wait_slaves(len(slaves))
        return self

    def kill(self) -> None:
        for broker in self.brokers:
            broker.kill()
        self.namesrv.kill()

    def __enter__(self) -> "HACluster":
        try:
            return self.start()
        except BaseException:
            self.kill()
            raise

    def __exit__(self, *exc_info) -> None:
        self.kill()
