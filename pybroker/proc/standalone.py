# `pybroker standalone`: a NameServer process and a broker supervisor, started and stopped together.
"""Standalone mode: the NameServer runs as a child of the broker's supervisor process.

The NameServer is forked first and must be accepting connections before the broker starts (the
broker registers at start). SIGTERM/SIGINT stop the broker first (it unregisters), then the
NameServer.
"""
import logging
import os
import signal
import socket
import time
from collections.abc import Callable

from pybroker import config as config_module
from pybroker.namesrv.server import run_namesrv
from pybroker.proc.supervisor import run_broker

log = logging.getLogger("pybroker.proc.standalone")

NAMESRV_READY_TIMEOUT_S = 20.0


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def run_standalone(config, namesrv_port: int,
                   on_serving: Callable[[], None] | None = None) -> int:
    """Run NameServer + broker; returns the broker's exit status. ``on_serving()`` runs once,
    when the broker serves and has registered with the NameServer."""
    # The embedded NameServer keeps its KV file beside the broker's store, not in ~/namesrv.
    kv_config_path = os.path.join(config.store.store_path_root_dir, "namesrv", "kvConfig.json")
    namesrv_config = config_module.load_namesrv_config(
        overrides={"listenPort": str(namesrv_port), "kvConfigPath": kv_config_path})
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # stopped by the parent, in order
            status = run_namesrv(namesrv_config)
        finally:
            os._exit(status)
    try:
        deadline = time.monotonic() + NAMESRV_READY_TIMEOUT_S
        while not _port_open(namesrv_port):
            if time.monotonic() > deadline or os.waitpid(pid, os.WNOHANG)[0]:
                log.error("the embedded NameServer did not start on port %d", namesrv_port)
                return 1
            time.sleep(0.05)   # tidy: allow (start-up wait, not a data-plane loop)
        return run_broker(config, on_serving)
    finally:
        try:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
