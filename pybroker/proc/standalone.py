# `pybroker standalone`: a NameServer process and a broker supervisor, started and stopped together.
"""Standalone mode: the NameServer runs as a child of the broker's supervisor process.

Every port (NameServer, listenPort, the fast port) is probed first: a port in use stops start-up
with a message before anything is started (an orphaned NameServer of an earlier run must not
be mistaken for ours). The NameServer is forked next (it dies with the supervisor, and ignores
SIGTERM/SIGINT sent to the process group, see :mod:`pybroker.proc.children`) and must be
accepting connections before the broker starts (the broker registers at start). SIGTERM/SIGINT
stop the broker first (it unregisters), then the NameServer.
"""
import dataclasses
import logging
import os
import signal
import socket
import time
from collections.abc import Callable

from pybroker import config as config_module
from pybroker.namesrv.server import run_namesrv
from pybroker.proc.children import STOP_SIGNAL, fork_child
from pybroker.errors import StartupError
from pybroker.proc import preflight
from pybroker.proc.listeners import PortUse, check_ports_free
from pybroker.proc.supervisor import run_broker

log = logging.getLogger("pybroker.proc.standalone")

NAMESRV_READY_TIMEOUT_S = 20.0
NAMESRV_STOP_TIMEOUT_S = 10.0
_NAMESRV_HOST = "127.0.0.1"


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((_NAMESRV_HOST, port), timeout=0.2):
            return True
    except OSError:
        return False


def run_standalone(config, namesrv_port: int,
                   on_serving: Callable[[], None] | None = None) -> int:
    """Run NameServer + broker; returns the broker's exit status. ``on_serving()`` runs once,
    when the broker serves and has registered with the NameServer."""
    # The embedded NameServer keeps its KV file beside the broker's store, not in ~/namesrv.
    kv_config_path = os.path.join(config.store.store_path_root_dir, "namesrv", "kvConfig.json")
    # Under aclEnable its broker's registration (loopback, where the NameServer listens) is
    # admitted by address, or signed when the broker has innerClientAuthenticationCredentials.
    try:
        # Everything the NameServer child and the broker need, before either starts: a
        # failure in the child could only be reported as "did not start".
        check_ports_free(_NAMESRV_HOST, [PortUse(namesrv_port, "the embedded NameServer",
                                                 "--namesrv-port")])
        preflight.check_broker_start(config)
    except StartupError as error:
        log.error("cannot start: %s", error)
        return 1
    namesrv_config = config_module.load_namesrv_config(
        overrides={"listenPort": str(namesrv_port), "kvConfigPath": kv_config_path,
                   "brokerRegistrationAllowedAddresses": _NAMESRV_HOST})
    # One TLS set-up and one plain_acl.yml for the whole standalone broker: Java clients with
    # tls.enable speak TLS to the NameServer as well, and under aclEnable its writes need an
    # admin account of the broker's file.
    namesrv_config = dataclasses.replace(namesrv_config, tls=config.tls,
                                         acl_file_path=config.derived.acl_file_path)
    pid = fork_child("namesrv", lambda: run_namesrv(namesrv_config, _NAMESRV_HOST,
                                                    stop_signals=(STOP_SIGNAL,)))
    try:
        deadline = time.monotonic() + NAMESRV_READY_TIMEOUT_S
        while not _port_open(namesrv_port):
            if time.monotonic() > deadline or os.waitpid(pid, os.WNOHANG)[0]:
                log.error("the embedded NameServer did not start on port %d", namesrv_port)
                return 1
            time.sleep(0.05)   # tidy: allow (start-up wait, not a data-plane loop)
        return run_broker(config, on_serving)
    finally:
        _stop_namesrv(pid)


def _stop_namesrv(pid: int) -> None:
    try:
        os.kill(pid, STOP_SIGNAL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + NAMESRV_STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.02)   # tidy: allow (shutdown wait, not a data-plane loop)
    log.error("the embedded NameServer did not stop within %.0f s: killing it",
              NAMESRV_STOP_TIMEOUT_S)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
