# The metadata service's unix socket in <store>/run, whatever the length of the store path.
"""The unix socket the remoting and gRPC workers reach the supervisor's metadata service on.

It lives in ``<store>/run`` (mode 0700: only the broker's user connects), but an AF_UNIX name
holds at most 107 bytes, and a store path a Java broker accepts may be as long as PATH_MAX. So
the supervisor opens the run directory and names the socket through that descriptor:
``/proc/self/fd/<n>/metadata.sock`` is short whatever the store path, the kernel resolves it to
the file in the run directory, and every worker, forked with the descriptor at the same
number, connects by the same name. A ``kill -9`` leaves the socket file behind; the next bind
(the next generation's, or the next start's) removes it first, as a start after any crash must.
"""
import contextlib
import os
import socket

__all__ = ["ServiceSocket", "SOCKET_NAME"]

SOCKET_NAME = "metadata.sock"
_BACKLOG = 64


class ServiceSocket:
    """The listening socket ``<run_dir>/metadata.sock``, bound and listening before the
    workers are forked; :attr:`address` is the name they connect to. :meth:`close` closes it
    and removes the file."""

    def __init__(self, run_dir: str):
        self._dir_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        self.address = f"/proc/self/fd/{self._dir_fd}/{SOCKET_NAME}"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(SOCKET_NAME, dir_fd=self._dir_fd)     # left by a kill -9
            self.listener.bind(self.address)
            self.listener.listen(_BACKLOG)
        except BaseException:
            self.listener.close()
            os.close(self._dir_fd)
            raise

    def close(self) -> None:
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SOCKET_NAME, dir_fd=self._dir_fd)
        os.close(self._dir_fd)
