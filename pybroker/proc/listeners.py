# The broker's listening sockets: bound once by the supervisor, before any worker exists.
"""Listening sockets of the remoting ports (listenPort and the fast port listenPort - 2).

A Java broker refuses to start on a port that is in use. Remoting workers share each port with
SO_REUSEPORT (one accept queue per worker, the kernel spreads connections), and SO_REUSEPORT
alone would let a second broker of the same user join the group and take half the
connections. So the supervisor first *probes* every port with a plain bind (no SO_REUSEPORT,
SO_REUSEADDR only so that TIME_WAIT leftovers do not count): any listener on it, ours or
another program's, makes the probe fail and start-up stops with :class:`PortInUseError`.
Then it binds one SO_REUSEPORT socket per worker and port, listens, and keeps them for the
broker's whole life: workers of every generation inherit them across ``fork()``, so a
generation restart never closes a port and connections arriving meanwhile wait in the backlog.
"""
import errno
import socket
from typing import NamedTuple

from pybroker.errors import StartupError

__all__ = ["PortInUseError", "PortUse", "check_ports_free", "Listeners", "reserve_port",
           "accepting"]

PRIVILEGED_PORTS_END = 1024     # ports below need root or CAP_NET_BIND_SERVICE


class PortInUseError(StartupError):
    """A port the broker needs cannot be bound: in use (another broker, an orphan, another
    program), privileged, or on an address this machine does not have."""


class PortUse(NamedTuple):
    """A port and what it is for: ``name`` says what listens there ("listenPort", "the fast
    port, listenPort-2"), ``key`` is the setting or option that moves it."""
    port: int
    name: str
    key: str


def _probe(host: str, use: PortUse) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, use.port))
        except OSError as error:
            raise PortInUseError(port_error_text(host, use, error)) from None


def port_error_text(host: str, use: PortUse, error: OSError) -> str:
    """One line for a failed bind of ``use.port``: what, the value, why, and the fix."""
    where = f"port {use.port} ({use.name}) on {host}"
    if error.errno == errno.EADDRINUSE:
        return (f"{where} is already in use: another broker or program listens there; "
                f"stop it or set {use.key} to a free port")
    if error.errno == errno.EACCES and use.port < PRIVILEGED_PORTS_END:
        return (f"{where}: permission denied: ports below {PRIVILEGED_PORTS_END} need root "
                f"or CAP_NET_BIND_SERVICE; set {use.key} to {PRIVILEGED_PORTS_END} or above")
    if error.errno == errno.EADDRNOTAVAIL:
        return (f"{where}: {host} is not an address of this machine; set bindAddress to one "
                f"of its addresses, or 0.0.0.0 for every interface")
    return f"{where} cannot be bound ({error.strerror}); set {use.key} to another port"


def check_ports_free(host: str, uses) -> None:
    """PortInUseError naming the first of ``uses`` (:class:`PortUse`) that cannot be bound."""
    for use in uses:
        _probe(host, use)


class Listeners:
    """One listening SO_REUSEPORT socket per (port, worker); :meth:`for_worker` gives a
    worker its own sockets. Create with :meth:`bind`."""

    def __init__(self, host: str, sockets: dict[int, list[socket.socket]]):
        self.host = host
        self.sockets = sockets

    @classmethod
    def bind(cls, host: str, uses, workers: int, backlog: int) -> "Listeners":
        """Probe every port of ``uses`` (:class:`PortUse`; PortInUseError), then bind and
        listen ``workers`` sockets each."""
        check_ports_free(host, uses)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sockets: dict[int, list[socket.socket]] = {}
        try:
            for port, _, _ in uses:
                sockets[port] = []
                for _ in range(workers):
                    listener = socket.socket(family, socket.SOCK_STREAM)
                    sockets[port].append(listener)
                    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                    listener.bind((host, port))
                    listener.listen(backlog)
        except BaseException:
            for group in sockets.values():
                for listener in group:
                    listener.close()
            raise
        return cls(host, sockets)

    def for_worker(self, index: int) -> dict[int, socket.socket]:
        """port -> the listening socket of worker ``index``."""
        return {port: group[index] for port, group in self.sockets.items()}

    def close(self) -> None:
        for group in self.sockets.values():
            for listener in group:
                listener.close()
        self.sockets = {}


def reserve_port(host: str, use: PortUse) -> socket.socket:
    """Probe ``use.port`` (PortInUseError), then hold it with a bound SO_REUSEPORT socket that
    never listens: processes that bind it themselves with SO_REUSEPORT (the gRPC workers:
    grpcio binds its own sockets) share it, connections go only to listening sockets, and no
    other program takes the port between two generations."""
    check_ports_free(host, [use])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    holder = socket.socket(family, socket.SOCK_STREAM)
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind((host, use.port))
    except BaseException:
        holder.close()
        raise
    return holder


def accepting(host: str, port: int) -> bool:
    """Whether a connection to ``port`` on ``host`` is accepted now (a wildcard host is probed
    on its loopback address): a port the workers bind themselves (gRPC) listens once one of
    them does. The probe connection is closed at once."""
    target = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    family = socket.AF_INET6 if ":" in target else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((target, port)) == 0
