# Launch a real pybroker (standalone: NameServer + broker) as a subprocess for tests and tools.
"""A pybroker standalone process on free 127.0.0.1 ports with its store in a temp directory.

``with StandaloneBroker(tmp_path) as broker:`` starts ``python -m pybroker standalone`` and
waits until the broker has registered with its NameServer (or fails with the log tail);
leaving the block stops it with SIGTERM (SIGKILL after a deadline). ``kill()`` is ``kill -9``
of the whole process group (crash tests); ``start()`` again restarts on the same store.
"""
import os
import signal
import subprocess
import sys
import time

from pybroker._testbase.ports import free_port

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
DISPATCH_TIMEOUT_S = 30.0
READY_LINE = "] boot success"   # the broker's line, not the NameServer's

TEST_PROFILE = {
    "brokerClusterName": "DefaultCluster",
    "brokerName": "broker-a",
    "brokerId": "0",
    "brokerIP1": "127.0.0.1",
    "brokerIP2": "127.0.0.1",
    "mappedFileSizeCommitLog": str(8 * 1024 * 1024),
    "mappedFileSizeConsumeQueue": str(6000 * 20),
    "maxMessageSize": str(1024 * 1024),
    "maxHashSlotNum": "10000",
    "maxIndexNum": "40000",
    "remotingWorkers": "2",
    # No gRPC endpoint unless a test asks for one (with a free grpcServerPort).
    "grpcWorkers": "0",
}


def read_log(path: str) -> str:
    """The text of a process's log file so far ("" before it exists)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            return log.read()
    except FileNotFoundError:
        return ""


def kill_process_group(process: subprocess.Popen | None) -> None:
    """``kill -9`` of ``process``'s whole process group (started with start_new_session), then
    reap it; nothing when it was never started."""
    if process is None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


class StandaloneBroker:
    """One pybroker standalone process. ``overrides``: broker.conf keys over TEST_PROFILE.
    ``pass_namesrv_port``: False starts it without ``--namesrv-port`` (the embedded NameServer
    port then comes from broker.conf's namesrvAddr)."""

    def __init__(self, work_dir, overrides: dict | None = None, pass_namesrv_port: bool = True):
        self.work_dir = str(work_dir)
        self.store_dir = os.path.join(self.work_dir, "store")
        self.namesrv_port = free_port()
        self.broker_port = free_port((-2, 0, 1))
        self.conf_path = os.path.join(self.work_dir, "broker.conf")
        self.log_path = os.path.join(self.work_dir, "pybroker.log")
        values = dict(TEST_PROFILE, listenPort=str(self.broker_port),
                      storePathRootDir=self.store_dir,
                      namesrvAddr=f"127.0.0.1:{self.namesrv_port}")
        values.update(overrides or {})
        os.makedirs(self.work_dir, exist_ok=True)
        with open(self.conf_path, "w", encoding="utf-8") as conf:
            conf.writelines(f"{key}={value}\n" for key, value in values.items())
        self.process: subprocess.Popen | None = None
        self.pass_namesrv_port = pass_namesrv_port
        # A cgroup's ``cgroup.procs`` file the broker joins before it starts (tools that run
        # it memory-limited, e.g. tools/prof_example.py); None: the caller's cgroup.
        self.cgroup_procs: str | None = None
        # The command that runs ``pybroker`` (its arguments follow): a test may run the broker
        # under a wrapper that changes its interpreter before pybroker starts.
        self.command: list[str] = [sys.executable, "-m", "pybroker"]

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def start(self) -> "StandaloneBroker":
        log = open(self.log_path, "ab")
        argv = [*self.command, "standalone", "-c", self.conf_path]
        if self.pass_namesrv_port:
            argv += ["--namesrv-port", str(self.namesrv_port)]
        self.process = subprocess.Popen(
            argv,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=self._join_cgroup if self.cgroup_procs else None)
        log.close()
        self._wait_ready()
        return self

    def _join_cgroup(self) -> None:
        """In the child before exec: move this process (and so every worker it forks) into
        the cgroup."""
        assert self.cgroup_procs is not None     # only set as preexec_fn with a cgroup
        with open(self.cgroup_procs, "w", encoding="ascii") as procs:
            procs.write(str(os.getpid()))

    def _log_text(self) -> str:
        return read_log(self.log_path)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        start_offset = len(self._log_text())
        process = self.process
        assert process is not None      # started by the caller
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"pybroker exited with {process.returncode}:\n"
                                   f"{self._log_text()[-4000:]}")
            if READY_LINE in self._log_text()[start_offset:]:
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"pybroker not ready after {READY_TIMEOUT_S} s:\n"
                           f"{self._log_text()[-4000:]}")

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit status (SIGKILL after the deadline)."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"pybroker did not stop in {STOP_TIMEOUT_S} s:\n"
                               f"{self._log_text()[-4000:]}") from None

    def wait_max_offset(self, topic: str, queue_id: int, expected: int,
                        timeout_s: float = DISPATCH_TIMEOUT_S) -> None:
        """Wait until the queue's max offset (GET_MAX_OFFSET: entries dispatched to its
        ConsumeQueue) reaches ``expected``; AssertionError after ``timeout_s``.

        A SEND_OK means the CommitLog has the record; the dispatcher makes it pullable a moment
        later (Java's reput does the same), so a test that pulls right after sending waits
        here first.
        """
        from pybroker.protocol.codes import RequestCode, ResponseCode
        from pybroker.protocol.command import create_request
        from pybroker.remoting.client import SyncRemotingClient
        request = {"topic": topic, "queueId": str(queue_id)}
        deadline = time.monotonic() + timeout_s
        with SyncRemotingClient() as client:
            client.connect(self.broker_addr)
            while True:
                response = client.invoke(create_request(RequestCode.GET_MAX_OFFSET, request),
                                         int(timeout_s * 1000))
                assert response.code == ResponseCode.SUCCESS, response.remark
                offset = int(response.ext_fields["offset"])
                if offset >= expected:
                    return
                assert time.monotonic() < deadline, (
                    f"{topic}/{queue_id}: max offset {offset} after {timeout_s} s, "
                    f"expected {expected}")
                time.sleep(0.02)

    def kill(self) -> None:
        """``kill -9`` every process of the broker (supervisor, workers, NameServer)."""
        kill_process_group(self.process)

    def __enter__(self) -> "StandaloneBroker":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        try:
            self.stop()
        finally:
            self.kill()
