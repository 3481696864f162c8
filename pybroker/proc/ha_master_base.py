# What the classic and the controller-mode (AutoSwitchHA) master ha workers share.
"""The parts of a master's HA port that do not depend on the protocol: following the
CommitLog the appender writes (:class:`CommitLogFollower`) and the buffers a slave connection
holds while a transfer unit goes out (:class:`TransferBuffers`). pybroker/proc/ha_master.py
(classic) and pybroker/proc/autoswitch_master.py (controller mode) build on them."""
import asyncio
import socket
from typing import Any

from pybroker.store.commitlog import CommitLog
from pybroker.store.control_block import ControlBlock
from pybroker.store.mapped_file import MappedFile
from pybroker.store.read_only_store import follow_commitlog

__all__ = ["CommitLogFollower", "TransferBuffers", "release_buffer"]


class CommitLogFollower:
    """A read-only CommitLog kept up to the control block's published positions."""

    control: ControlBlock
    commitlog: CommitLog
    written: int
    commitlog_min_offset: int

    def follow(self) -> None:
        """Bring the read-only CommitLog up to the published written position (and drop the
        maps of files the dispatcher's cleanup deleted)."""
        control = self.control
        min_offset = control.commitlog_min_offset
        if min_offset > self.commitlog_min_offset:
            self.commitlog_min_offset = min_offset
            self.commitlog.mapped_file_queue.forget_files_below(min_offset)
        written = control.written_position
        if written != self.written:
            follow_commitlog(self.commitlog, self.written, written)
            self.written = written


class TransferBuffers:
    """A slave connection's output: the pending unit's buffers (``out``) and the mapped file
    its view holds (``out_file``), released when the connection ends."""

    service: Any
    sock: socket.socket
    out: list
    out_file: MappedFile | None
    writer_registered: bool

    def _release_file(self) -> None:
        if self.out_file is not None:
            self.out_file.release()
            self.out_file = None

    def _detach(self) -> None:
        """The end of a connection: off the loop, its buffers and file released, the socket
        closed, and the service told (its ``removed``)."""
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.sock)
        if self.writer_registered:
            loop.remove_writer(self.sock)
        for buffer in self.out:
            release_buffer(buffer)
        self.out = []
        self._release_file()
        self.sock.close()
        self.service.removed(self)


def release_buffer(buffer) -> None:
    """Release a view of a mapped file (other buffers need nothing)."""
    if isinstance(buffer, memoryview):
        buffer.release()
