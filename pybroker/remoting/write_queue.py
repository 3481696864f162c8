# The frames one remoting connection writes at the end of a loop turn, in one system call.
"""One connection's write queue (:class:`WriteQueue`).

Encoded frames are queued during a loop turn and written together (the connection schedules
:meth:`WriteQueue.write_to` once per turn), so the replies to every frame of one read leave in
one system call. A pull's records (:class:`pybroker.protocol.command.MappedBody`, views of the
mapped CommitLog) are queued as those views after their frame head and are never copied in
user space: on a plain socket whose transport has nothing buffered the queue goes out with
``os.writev`` (asyncio 3.11's ``writelines`` would join it into one bytes), only a part the kernel
does not take is copied into the transport's buffer; over TLS the queue is joined. The views
are released once written.
"""
import asyncio
import os

from pybroker.protocol.command import MappedBody

# IOV_MAX on Linux: parts per os.writev call.
_WRITEV_MAX_PARTS = 1024


class WriteQueue:
    """Frames (and mapped record views) waiting for this loop turn's write."""

    __slots__ = ("_parts", "queued_bytes", "_holds", "socket_fd")

    def __init__(self):
        self._parts: list[bytes | memoryview] = []
        self.queued_bytes = 0         # bytes in the queue
        self._holds: list[MappedBody] = []    # released once the queue is written
        self.socket_fd = -1           # a plain socket written with os.writev (not TLS)

    def __bool__(self) -> bool:
        return bool(self._parts)

    def append(self, frame: bytes) -> None:
        """Queue one encoded frame (or several, as one bytes object)."""
        self._parts.append(frame)
        self.queued_bytes += len(frame)

    def append_mapped(self, body: MappedBody) -> None:
        """Queue a pull's mapped record views (after their frame head); they are released
        once written, or when the queue is dropped."""
        self._parts.extend(body.views)
        self.queued_bytes += body.nbytes
        self._holds.append(body)

    def write_to(self, transport: asyncio.Transport) -> None:
        """Write the queue in order, then release the mapped views it held."""
        parts, self._parts = self._parts, []
        self.queued_bytes = 0
        if parts:
            self._write_out(transport, parts)
        self._release_holds()

    def drop(self) -> None:
        """Forget the queue unwritten (the connection is lost)."""
        self._parts.clear()
        self.queued_bytes = 0
        self._release_holds()

    def _write_out(self, transport: asyncio.Transport, queue: list) -> None:
        """Straight to a plain socket while the transport holds nothing (the views are not
        copied), else through the transport."""
        if self.socket_fd < 0 or transport.get_write_buffer_size() or transport.is_closing():
            transport.writelines(queue)
            return
        start = 0
        while start < len(queue):
            parts = queue[start:start + _WRITEV_MAX_PARTS]
            try:
                written = os.writev(self.socket_fd, parts)
            except (BlockingIOError, InterruptedError):
                written = 0
            except OSError:
                break        # the transport's own write meets the error and closes
            for part in parts:
                if written < len(part):
                    if written:
                        queue[start] = part[written:]
                    break
                written -= len(part)
                start += 1
            else:
                continue
            break
        if start < len(queue):
            transport.write(b"".join(queue[start:]))

    def _release_holds(self) -> None:
        holds, self._holds = self._holds, []
        for body in holds:
            body.release()
