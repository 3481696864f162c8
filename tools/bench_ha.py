# Master/slave pairs for tools/bench_side_by_side.py: pybroker's pair and Java's, same conf.
"""A master with one slave on 127.0.0.1, for the ASYNC_MASTER / SYNC_MASTER scenarios.

Both pairs get the same broker.conf (the shared one, plus ``brokerRole``, ``brokerId`` and
loopback ``brokerIP2``) and the same shape: the master with its NameServer (pybroker standalone,
or the Java harness's NameServer + broker) and a slave broker registering with that NameServer.
``start()`` returns once the slave holds an established connection to the master's HA port
(seen with psutil, the same way for both brokers), so the first measured send already has a
slave. Per-process figures cover both brokers; the slave's processes are reported with a
``slave-`` prefix.
"""
import pathlib
import sys
import time

import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402
import java_rocketmq as jr  # noqa: E402

SLAVE_CONNECT_TIMEOUT_S = 90.0


def pair_conf(conf: dict, role: str) -> dict:
    """The master's conf for ``role`` (ASYNC_MASTER or SYNC_MASTER)."""
    return dict(conf, brokerRole=role, brokerId="0", brokerIP2=jr.LOOPBACK)


def slave_conf(conf: dict) -> dict:
    return dict(conf, brokerRole="SLAVE", brokerId="1", brokerIP1=jr.LOOPBACK,
                brokerIP2=jr.LOOPBACK)


def _slave_connected(ha_port: int, slave_pids: list[int]) -> bool:
    """An ESTABLISHED connection to 127.0.0.1:ha_port owned by one of the slave's processes."""
    owners = set()
    for pid in slave_pids:
        try:
            root = psutil.Process(pid)
            owners |= {p.pid for p in [root, *root.children(recursive=True)]}
        except psutil.Error:
            continue
    for connection in psutil.net_connections(kind="tcp"):
        if (connection.status == psutil.CONN_ESTABLISHED and connection.raddr
                and connection.raddr.port == ha_port and connection.pid in owners):
            return True
    return False


def _wait_slave(ha_port: int, slave_pids, what: str) -> None:
    deadline = time.monotonic() + SLAVE_CONNECT_TIMEOUT_S
    while not _slave_connected(ha_port, slave_pids()):
        if time.monotonic() > deadline:
            raise jr.HarnessError(f"{what}: no slave connected to HA port {ha_port} within "
                                  f"{SLAVE_CONNECT_TIMEOUT_S} s")
        time.sleep(0.2)


class _Pair:
    """What bench_side_by_side needs of a broker, for a master + slave."""

    def __init__(self, master, slave_pids):
        self.master = master
        self._slave_pids = slave_pids

    @property
    def namesrv_addr(self) -> str:
        return self.master.namesrv_addr

    @property
    def broker_addr(self) -> str:
        return self.master.broker_addr

    @property
    def ha_port(self) -> int:
        return int(self.master.broker_addr.rsplit(":", 1)[1]) + 1

    def root_pids(self) -> list[int]:
        return self.master.root_pids() + self._slave_pids()

    def role_of(self, process: psutil.Process) -> str:
        slave_pids = set(self._slave_pids())
        try:
            ancestry = {process.pid} | {p.pid for p in process.parents()}
        except psutil.Error:
            ancestry = {process.pid}
        if ancestry & slave_pids:
            return "slave-" + self._slave_role(process)
        return self.master.role_of(process)

    def log_tail(self, chars: int = 3000) -> str:
        return self.master.log_tail(chars)

    def exited(self) -> str | None:
        """None while master and slave run; else which ended, one line."""
        master = self.master.exited()
        if master:
            return master
        for pid in self._slave_pids():
            try:
                gone = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            except psutil.Error:
                gone = True
            if gone:
                return f"{self.name}'s slave (pid {pid}) exited during the load"
        return None


class PyBrokerPair(_Pair):
    """pybroker standalone (NameServer + master) and a ``pybroker broker`` slave."""
    name = "pybroker"

    def __init__(self, work_dir: pathlib.Path, conf: dict, role: str):
        work_dir = pathlib.Path(work_dir)
        master = bb.PyBroker(work_dir / "master", pair_conf(conf, role))
        super().__init__(master, self._pids)
        self.slave_dir = work_dir / "slave"
        self.slave_dir.mkdir(parents=True, exist_ok=True)
        self.slave_conf = slave_conf(conf)
        self.slave_process = None

    def _pids(self) -> list[int]:
        return [self.slave_process.pid] if self.slave_process is not None else []

    def _slave_role(self, process: psutil.Process) -> str:
        if process.pid in self._pids():
            return "supervisor"
        name = process.name()
        return name[3:] if name.startswith("pb-") else "other"

    def start(self) -> "PyBrokerPair":
        self.master.start()
        port = jr.free_port(offsets=(-2, 0, 1))
        store = self.slave_dir / "store"
        conf = dict(self.slave_conf, listenPort=str(port), storePathRootDir=str(store),
                    storePathCommitLog=str(store / "commitlog"),
                    namesrvAddr=self.master.namesrv_addr)
        conf_path = self.slave_dir / "broker.conf"
        jr.write_properties(conf_path, conf)
        self.slave_process = bb.spawn([*bb.installed_pybroker().argv, "broker", "-c",
                                       str(conf_path)], self.slave_dir / "pybroker.log",
                                      cwd=self.slave_dir)
        _wait_slave(self.ha_port, self._pids, "pybroker pair")
        return self

    def stop(self) -> None:
        if self.slave_process is not None:
            bb.stop_process(self.slave_process)
            self.slave_process = None
        self.master.stop()


class JavaBrokerPair(_Pair):
    """Java NameServer + master (the harness) and a Java slave registering with it."""

    def __init__(self, work_dir: pathlib.Path, conf: dict, install: jr.RocketMQInstall,
                 role: str, heap_mb: int = 1024):
        work_dir = pathlib.Path(work_dir)
        master = bb.JavaBroker(work_dir / "master", pair_conf(conf, role), install, heap_mb)
        super().__init__(master, self._pids)
        self.name = master.name
        slave_dir = work_dir / "slave"
        slave_dir.mkdir(parents=True, exist_ok=True)
        conf_path = slave_dir / "shared-broker.conf"
        store = slave_dir / "store"
        jr.write_properties(conf_path, dict(slave_conf(conf), storePathRootDir=str(store),
                                            storePathCommitLog=str(store / "commitlog")))
        self.slave = jr.JavaRocketMQ(slave_dir, install=install,
                                     namesrv_port=master.harness.namesrv_port,
                                     broker_port=jr.free_port(offsets=(-2, 0, 1)),
                                     broker_conf=conf_path, broker_heap_mb=heap_mb,
                                     ready_timeout_s=bb.READY_TIMEOUT_S, own_namesrv=False)

    def _pids(self) -> list[int]:
        return [process.pid for process in self.slave.processes.values()]

    def _slave_role(self, process: psutil.Process) -> str:
        return "broker" if process.pid in self._pids() else "jvm-child"

    def start(self) -> "JavaBrokerPair":
        self.master.start()
        self.slave.start()
        _wait_slave(self.ha_port, self._pids, self.name + " pair")
        return self

    def stop(self) -> None:
        self.slave.stop()
        self.master.stop()
