# Runs Apache's rocketmq-proxy 5.3.3 (Maven Central jars) in CLUSTER mode in front of a NameServer.
"""Apache RocketMQ's gRPC proxy in front of pybroker (or any RocketMQ cluster), as users run it.

RocketMQ 5's SDKs (rocketmq-clients: Java, Go, Python, ...) speak gRPC to a proxy, never
remoting to a broker. In CLUSTER mode the proxy is a remoting client of the NameServer and the
brokers, so it sits in front of pybroker as in front of a Java broker. Its jars are those of the
Java RocketMQ 5.3.3 install (tools/java_rocketmq.py: rocketmq-proxy is one of its
dependencies, ~/.cache/pybroker/rocketmq-5.3.3/lib).

CLI (from the repository's root; the jars install on first use, about a minute)::

    python3 tools/rocketmq_proxy.py run -n 127.0.0.1:9876      # foreground; Ctrl-C stops it
    python3 tools/rocketmq_proxy.py start -n 127.0.0.1:9876 --work-dir DIR   # detached
    python3 tools/rocketmq_proxy.py status|stop --work-dir DIR

Ports: gRPC 8091 (the SDKs' endpoint) and remoting 8090 by default (``--grpc-port``,
``--remoting-port``, ``--free-ports``; Apache's 8081 is pybroker standalone's own gRPC port).
The proxy binds every interface: RocketMQ 5.3.3's gRPC and remoting servers take a port, no
address. ``run`` and ``start`` write
``<work-dir>/conf/rmq-proxy.json`` (CLUSTER mode, namesrvAddr, the two ports, cluster name,
``-c KEY=VALUE`` for any other ProxyConfig key) and start the JVM with a small heap
(``--heap-mb``, 256 by default); the proxy's own logs are under
``<work-dir>/home/logs/rocketmqlogs/`` (proxy.log).

Library::

    with RocketMQProxy(work_dir, "127.0.0.1:9876", free_ports=True) as proxy:
        print(proxy.grpc_endpoint)             # 127.0.0.1:<port> for the SDKs

``capture_brokers`` puts tools/capture_proxy.py relays between the proxy and the NameServer and
each named broker (the NameServer's answers are rewritten to send the proxy through the broker
relays): ``<work-dir>/capture/namesrv.jsonl`` and ``broker-N.jsonl`` then hold every remoting
frame the proxy exchanged, which is how the tests know what the proxy asks of a broker.
"""
import argparse
import atexit
import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import capture_proxy  # noqa: E402
import java_rocketmq as jr  # noqa: E402

PROXY_VERSION = "5.3.3"            # the install whose lib/ holds rocketmq-proxy-5.3.3.jar
PROXY_CLASS = "org.apache.rocketmq.proxy.ProxyStartup"
READY_LINE = "rocketmq-proxy startup successfully"
# Apache's defaults are 8081 and 8080; pybroker standalone serves its own gRPC endpoint on 8081
# (docs/architecture/grpc.md), so the proxy in front of it takes the next ten.
DEFAULT_GRPC_PORT = 8091
DEFAULT_REMOTING_PORT = 8090
DEFAULT_HEAP_MB = 256
DEFAULT_CLUSTER = "DefaultCluster"


def default_work_dir() -> pathlib.Path:
    """~/.cache/pybroker/rocketmq-proxy (conf, logs and pids.json of the CLI's proxy)."""
    return pathlib.Path.home() / ".cache" / "pybroker" / "rocketmq-proxy"


def proxy_config(namesrv_addr: str, grpc_port: int, remoting_port: int,
                 cluster_name: str = DEFAULT_CLUSTER, overrides=None) -> dict:
    """rmq-proxy.json for CLUSTER mode: which NameServer, which cluster, which ports.

    localServeAddr is the address the proxy names itself by in what it tells clients and
    brokers; left empty, 5.3.3 takes the machine's first non-loopback address.
    """
    config = {"proxyMode": "cluster", "rocketMQClusterName": cluster_name,
              "namesrvAddr": namesrv_addr, "grpcServerPort": grpc_port,
              "remotingListenPort": remoting_port, "localServeAddr": jr.LOOPBACK}
    config.update(overrides or {})
    return config


def install(timeout_s: float = 1800) -> jr.RocketMQInstall:
    """The Java RocketMQ 5.3.3 install (jars from Maven Central on first use) with the proxy."""
    rocketmq = jr.RocketMQInstall(PROXY_VERSION)
    rocketmq.install(timeout_s)
    if not list(rocketmq.lib_dir.glob(f"rocketmq-proxy-{PROXY_VERSION}.jar")):
        raise jr.HarnessError(f"rocketmq-proxy-{PROXY_VERSION}.jar missing in {rocketmq.lib_dir}")
    return rocketmq


class RocketMQProxy:
    """One rocketmq-proxy JVM in CLUSTER mode under work_dir (context manager: start/stop).

    config_overrides: further rmq-proxy.json keys (ProxyConfig's names). capture_brokers:
    broker addresses ("127.0.0.1:port") to relay through capture proxies (see the module doc).
    """

    def __init__(self, work_dir, namesrv_addr: str, install: jr.RocketMQInstall | None = None,
                 grpc_port: int = DEFAULT_GRPC_PORT, remoting_port: int = DEFAULT_REMOTING_PORT,
                 free_ports: bool = False, cluster_name: str = DEFAULT_CLUSTER,
                 heap_mb: int = DEFAULT_HEAP_MB, config_overrides=None, capture_brokers=(),
                 ready_timeout_s: float = 120, stop_timeout_s: float = 30):
        self.install = install or jr.RocketMQInstall(PROXY_VERSION)
        self.work_dir = pathlib.Path(work_dir).resolve()
        if free_ports:
            grpc_port, remoting_port = jr.free_port(), jr.free_port()
        self.grpc_port, self.remoting_port = grpc_port, remoting_port
        self.namesrv_addr = namesrv_addr
        self.cluster_name = cluster_name
        self.heap_mb = heap_mb
        self.config_overrides = dict(config_overrides or {})
        self.capture_brokers = list(capture_brokers)
        self.ready_timeout_s, self.stop_timeout_s = ready_timeout_s, stop_timeout_s
        self.home_dir = self.work_dir / "home"
        self.conf_path = self.work_dir / "conf" / "rmq-proxy.json"
        self.out_path = self.work_dir / "proxy.out"
        self.log_path = self.home_dir / "logs" / "rocketmqlogs" / "proxy.log"
        self.capture_dir = self.work_dir / "capture"
        self.marker = f"-Dpybroker.harness={self.work_dir}"
        self.process: subprocess.Popen | None = None
        self._captures: list[capture_proxy.CaptureProxy] = []
        self.ready_s = 0.0

    @property
    def grpc_endpoint(self) -> str:
        return f"{jr.LOOPBACK}:{self.grpc_port}"

    def _start_captures(self) -> str:
        """Relays for the NameServer and each broker; the NameServer address the proxy uses."""
        if not self.capture_brokers:
            return self.namesrv_addr
        self.capture_dir.mkdir(parents=True, exist_ok=True)
        rewrites = []
        for number, broker in enumerate(self.capture_brokers):
            relay_port = jr.free_port()
            # The closing quote keeps 127.0.0.1:1234 from matching 127.0.0.1:12345.
            rewrites.append((f'{broker}"', f'{jr.LOOPBACK}:{relay_port}"'))
            self._captures.append(capture_proxy.CaptureProxy(
                relay_port, int(broker.rsplit(":", 1)[1]),
                self.capture_dir / f"broker-{number}.jsonl"))
        namesrv_relay = jr.free_port()
        self._captures.append(capture_proxy.CaptureProxy(
            namesrv_relay, int(self.namesrv_addr.split(";")[0].rsplit(":", 1)[1]),
            self.capture_dir / "namesrv.jsonl", rewrites))
        for relay in self._captures:
            relay.start()
        return f"{jr.LOOPBACK}:{namesrv_relay}"

    def write_config(self, namesrv_addr: str) -> None:
        self.conf_path.parent.mkdir(parents=True, exist_ok=True)
        config = proxy_config(namesrv_addr, self.grpc_port, self.remoting_port,
                              self.cluster_name, self.config_overrides)
        self.conf_path.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")

    def argv(self) -> list[str]:
        heap = self.heap_mb
        return ["java", *jr.SERVER_FLAGS, f"-XX:MaxDirectMemorySize={heap}m",
                *jr.jvm_flags(heap, self.home_dir, self.home_dir / "logs", self.marker),
                "-Drmq.logback.configurationFile=rmq.proxy.logback.xml",
                "-cp", self.install.classpath(), PROXY_CLASS, "-pc", str(self.conf_path)]

    def start(self, detach: bool = False) -> "RocketMQProxy":
        """Write rmq-proxy.json, start the JVM, wait for its start line and gRPC port."""
        self.install.require()
        jr.cleanup_stale(self.work_dir, self.stop_timeout_s)
        self.home_dir.mkdir(parents=True, exist_ok=True)
        if not detach:
            atexit.register(self.stop)
        try:
            self.write_config(self._start_captures())
            started = time.monotonic()
            with open(self.out_path, "wb") as out:
                self.process = subprocess.Popen(self.argv(), cwd=self.work_dir,
                                                stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=subprocess.STDOUT,
                                                start_new_session=True)
            self._record_pid()
            self._wait_ready(started)
            self.ready_s = time.monotonic() - started
        except BaseException:
            self.stop()
            raise
        return self

    def _record_pid(self) -> None:
        state = {"marker": self.marker, "grpc_port": self.grpc_port,
                 "remoting_port": self.remoting_port, "namesrv_addr": self.namesrv_addr,
                 "processes": [{"role": "proxy", "pid": self.process.pid}]}
        (self.work_dir / "pids.json").write_text(json.dumps(state, indent=1))

    def _wait_ready(self, started: float) -> None:
        deadline = started + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise jr.HarnessError(f"rocketmq-proxy exited with {self.process.returncode} "
                                      f"before ready\n{self.log_tail()}")
            text = self.out_path.read_text(encoding="utf-8", errors="replace")
            if READY_LINE in text and jr.wait_for_port(self.grpc_port, timeout_s=1.0):
                return
            time.sleep(0.1)
        raise jr.HarnessError(f"rocketmq-proxy not ready after {self.ready_timeout_s} s\n"
                              + self.log_tail())

    def log_tail(self) -> str:
        return jr.tail(self.out_path) + "\n" + jr.tail(self.log_path)

    def stop(self, graceful: bool = True) -> int | None:
        """SIGTERM (SIGKILL after stop_timeout_s), then the capture relays; the exit code.

        The proxy keeps nothing that a stop must save, and its graceful stop takes 10 s or more
        (gRPC's shutdown, then each remoting client's event loops): graceful=False is kill -9.
        """
        code = None
        if self.process is not None:
            if graceful:
                jr.stop_process(self.process, self.stop_timeout_s)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=self.stop_timeout_s)
            code = self.process.returncode
            self.process = None
        for relay in self._captures:
            relay.stop()
        self._captures.clear()
        (self.work_dir / "pids.json").unlink(missing_ok=True)
        atexit.unregister(self.stop)
        return code

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> "RocketMQProxy":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "start", "stop", "status", "install"))
    parser.add_argument("-n", "--namesrv-addr", default=f"{jr.LOOPBACK}:9876",
                        help="the NameServer of the cluster behind the proxy")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER, help="rocketMQClusterName")
    parser.add_argument("--grpc-port", type=int, default=DEFAULT_GRPC_PORT)
    parser.add_argument("--remoting-port", type=int, default=DEFAULT_REMOTING_PORT)
    parser.add_argument("--free-ports", action="store_true", help="pick free ports at run time")
    parser.add_argument("--heap-mb", type=int, default=DEFAULT_HEAP_MB)
    parser.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE",
                        help="another rmq-proxy.json key (a number or true/false as such)")
    parser.add_argument("--work-dir", type=pathlib.Path, default=None,
                        help="conf, logs, pids.json (default ~/.cache/pybroker/rocketmq-proxy)")
    parser.add_argument("--timeout-s", type=float, default=120)
    return parser


def _config_value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    work_dir = args.work_dir or default_work_dir()
    if args.command == "stop":
        sys.stdout.write(json.dumps({"stopped": jr.cleanup_stale(work_dir)}) + "\n")
        return 0
    if args.command == "status":
        try:
            state = json.loads((work_dir / "pids.json").read_text())
        except (OSError, ValueError):
            sys.stdout.write(json.dumps({"running": False}) + "\n")
            return 1
        (entry,) = state["processes"]
        running = jr.pid_alive_with_marker(entry["pid"], state["marker"])
        sys.stdout.write(json.dumps({"running": running, **state}) + "\n")
        return 0 if running else 1
    rocketmq = install(max(args.timeout_s, 1800))
    if args.command == "install":
        sys.stdout.write(json.dumps({"lib_dir": str(rocketmq.lib_dir)}) + "\n")
        return 0
    overrides = {key: _config_value(value) for key, _, value in
                 (item.partition("=") for item in args.config)}
    proxy = RocketMQProxy(work_dir, args.namesrv_addr, rocketmq, args.grpc_port,
                          args.remoting_port, args.free_ports, args.cluster, args.heap_mb,
                          overrides, ready_timeout_s=args.timeout_s)
    # `kill <pid>` of this command stops the proxy too (the JVM runs in its own session),
    # also while it is starting.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Ctrl-C stops this foreground command whatever its parent left: a SIGINT ignored or
    # blocked when it was started (a test runner's worker, a service manager) is taken back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    proxy.start(detach=args.command == "start")
    sys.stdout.write(f"rocketmq-proxy {PROXY_VERSION} (CLUSTER mode, NameServer "
                     f"{args.namesrv_addr}) serving gRPC on {proxy.grpc_endpoint} and remoting "
                     f"on port {proxy.remoting_port}, pid {proxy.process.pid}\n"
                     f"  config {proxy.conf_path}\n  logs   {proxy.log_path}\n")
    sys.stdout.flush()
    if args.command == "start":
        return 0
    try:
        return proxy.process.wait() or 0
    except KeyboardInterrupt:
        return 0
    finally:
        proxy.stop()


if __name__ == "__main__":
    sys.exit(main())
