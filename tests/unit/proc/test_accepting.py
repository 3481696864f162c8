"""proc/listeners.accepting tells whether a port accepts connections now: the supervisor's
"boot success" waits on it for grpcServerPort, which the gRPC workers bind themselves.

Method: real sockets on 127.0.0.1 - a port held by a bound SO_REUSEPORT socket that never
listens (as the supervisor holds grpcServerPort: reserve_port) is not accepting; it is once a
second socket of the group listens, and a wildcard bind address is probed on loopback.
"""
import socket

from pybroker._testbase.cluster import free_port
from pybroker.proc.listeners import PortUse, accepting, reserve_port


def test_a_reserved_port_accepts_only_once_a_worker_listens():
    port = free_port()
    holder = reserve_port("127.0.0.1", PortUse(port, "grpcServerPort", "grpcServerPort"))
    try:
        assert not accepting("127.0.0.1", port)
        assert not accepting("0.0.0.0", port)
        worker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            worker.bind(("127.0.0.1", port))
            worker.listen()
            assert accepting("127.0.0.1", port)
            assert accepting("0.0.0.0", port)       # a wildcard bind address: loopback
        finally:
            worker.close()
    finally:
        holder.close()
