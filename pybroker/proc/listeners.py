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

from pybroker.errors import BrokerError

__all__ = ["PortInUseError", "check_ports_free", "Listeners", "reserve_port"]


class PortInUseError(BrokerError):
    """A port the broker needs is already bound (another broker, an orphan, another program)."""


def _probe(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUseError(
                    f"port {port} on {host} is already in use ({error.strerror}): another "
                    f"broker or program listens there; stop it or choose another "
                    f"port") from None
            raise


def check_ports_free(host: str, ports) -> None:
    """PortInUseError naming the first of ``ports`` that something listens on."""
    for port in ports:
        _probe(host, port)


class Listeners:
    """One listening SO_REUSEPORT socket per (port, worker); :meth:`for_worker` gives a
    worker its own sockets. Create with :meth:`bind`."""

    def __init__(self, host: str, sockets: dict[int, list[socket.socket]]):
        self.host = host
        self.sockets = sockets

    @classmethod
    def bind(cls, host: str, ports, workers: int, backlog: int) -> "Listeners":
        """Probe every port (PortInUseError), then bind and listen ``workers`` sockets each."""
        check_ports_free(host, ports)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sockets: dict[int, list[socket.socket]] = {}
        try:
            for port in ports:
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


def reserve_port(host: str, port: int) -> socket.socket:
    """Probe ``port`` (PortInUseError), then hold it with a bound SO_REUSEPORT socket that
    never listens: processes that bind it themselves with SO_REUSEPORT (the gRPC workers:
    grpcio binds its own sockets) share it, connections go only to listening sockets, and no
    other program takes the port between two generations."""
    check_ports_free(host, [port])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    holder = socket.socket(family, socket.SOCK_STREAM)
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind((host, port))
    except BaseException:
        holder.close()
        raise
    return holder
