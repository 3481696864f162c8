# Checks made before a broker or NameServer starts anything: directories it writes, ports it binds.
"""Start-up checks that turn the usual first-run mistakes into one line each.

A store path under a regular file, a directory the process may not write, a read-only file
system, a port that is in use, privileged or on an address the machine does not have: each
would otherwise surface as an ``OSError`` traceback from deep inside a worker (or from the
embedded NameServer, whose failure the broker could only report as "did not start"). These
checks run in the supervisor before anything is forked, and raise
:class:`pybroker.errors.StartupError` with ``key=value: what is wrong; the fix``.
"""
import errno
import os
import pwd
import tempfile

from pybroker.errors import StartupError
from pybroker.proc.listeners import PortUse, check_ports_free

__all__ = ["check_writable_directory", "broker_directories", "broker_port_uses",
           "check_broker_start", "metrics_port_use"]

_PROBE_PREFIX = ".pybroker-write-probe-"


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _blocking_file(path: str) -> str | None:
    """The first component of ``path`` that exists and is not a directory, or None."""
    current = os.path.abspath(path)
    parts = []
    while True:
        parts.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for candidate in reversed(parts):
        if os.path.lexists(candidate) and not os.path.isdir(candidate):
            return candidate
        if not os.path.exists(candidate):
            return None
    return None


def _nearest_existing(path: str) -> str:
    current = os.path.abspath(path)
    while not os.path.exists(current) and os.path.dirname(current) != current:
        current = os.path.dirname(current)
    return current


def _problem(path: str) -> str | None:
    """Why ``path`` cannot be used as a directory this process writes, or None."""
    blocking = _blocking_file(path)
    if blocking == os.path.abspath(path):
        return "is a file, not a directory"
    if blocking is not None:
        return f"is under {blocking}, which is a file, not a directory"
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        return _os_problem(error, _nearest_existing(path), "create directories in")
    try:
        descriptor, probe = tempfile.mkstemp(prefix=_PROBE_PREFIX, dir=path)
    except OSError as error:
        return _os_problem(error, path, "write in")
    os.close(descriptor)
    os.unlink(probe)
    return None


def _os_problem(error: OSError, directory: str, action: str) -> str:
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"user {_user()} may not {action} {directory} (permission denied)"
    if error.errno == errno.EROFS:
        return f"{directory} is on a read-only file system"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk of {directory} is full"
    return f"cannot {action} {directory}: {error.strerror}"


def check_writable_directory(key: str, path: str, where: str = "broker.conf") -> None:
    """Create ``path`` if needed and prove this process can write in it; else StartupError
    ``key=path: problem; set key in <where> to a directory user U may write``."""
    problem = _problem(path)
    if problem is not None:
        raise StartupError(f"{key}={path}: {problem}; set {key} in {where} to a directory "
                           f"user {_user()} may write")


def broker_directories(config) -> list[tuple[str, str]]:
    """(key, directory) of every directory a broker writes: the store root (lock, abort,
    checkpoint, config/, consume queues, index, run/) and the CommitLog's."""
    store = config.store
    found = [("storePathRootDir", store.store_path_root_dir)]
    if store.store_path_commit_log is not None:
        found.append(("storePathCommitLog", store.store_path_commit_log))
    return found


def broker_port_uses(config) -> list[PortUse]:
    """The remoting ports (listenPort and the fast port listenPort-2)."""
    return [PortUse(config.broker.listen_port, "listenPort", "listenPort"),
            PortUse(config.derived.fast_listen_port, "the fast port, listenPort-2",
                    "listenPort")]


def grpc_port_use(config) -> PortUse:
    """The gRPC endpoint's port (served when grpcWorkers > 0)."""
    return PortUse(config.grpc.grpc_server_port, "the gRPC endpoint", "grpcServerPort")


def metrics_port_use(config) -> tuple[str, PortUse] | None:
    """(host, port use) of the Prometheus endpoint, or None when it is off."""
    broker = config.broker
    if broker.metrics_exporter_type != "PROM":
        return None
    host = broker.metrics_prom_exporter_host or broker.broker_ip1
    return host, PortUse(broker.metrics_prom_exporter_port, "the metrics endpoint",
                         "metricsPromExporterPort")


def check_broker_start(config) -> None:
    """StartupError for the first directory or port (remoting, metrics) the broker cannot
    use. haListenPort is probed where it is bound (a slave does not bind it)."""
    for key, directory in broker_directories(config):
        check_writable_directory(key, directory)
    grpc = [grpc_port_use(config)] if config.grpc.grpc_workers else []
    check_ports_free(config.remoting.bind_address, broker_port_uses(config) + grpc)
    metrics = metrics_port_use(config)
    if metrics is not None:
        check_ports_free(*metrics[:1], metrics[1:])


def check_namesrv_start(config, listen_address: str) -> None:
    """StartupError when the NameServer's KV directory or port cannot be used."""
    kv_path = config.namesrv.kv_config_path
    problem = _problem(os.path.dirname(os.path.abspath(kv_path)))
    if problem is not None:
        raise StartupError(f"kvConfigPath={kv_path}: its directory {problem}; set "
                           f"kvConfigPath in namesrv.conf to a file in a directory user "
                           f"{_user()} may write")
    check_ports_free(listen_address, [PortUse(config.namesrv.listen_port, "listenPort",
                                              "listenPort")])
