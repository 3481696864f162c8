# The receive buffer of one remoting connection: the kernel reads into its free end.
"""One connection's receive buffer (:class:`ReceiveBuffer`).

The kernel reads into the free space at the end (``recv_into`` through asyncio's
BufferedProtocol); the connection's receive loop consumes whole frames from the start. Memory:
the buffer (64 KiB) is allocated at the first read, grows at most by doubling per read up to the
frame being received (so a peer must really send the bytes it announces), and shrinks back to
64 KiB once it is empty. A closed connection drops it.

A read that ends inside a frame (the common case once more than 64 KiB of sends is queued, e.g.
64 sends of 1 KiB in flight) leaves that frame's head held: the next read goes into the free
space after it while at least ``RECEIVE_READ_MIN_BYTES`` are free, else the held bytes are moved
to the start. Only a frame that does not fit grows the buffer: a partial frame never costs a
new 64 KiB buffer (zeroed) and then another one when it empties
(docs/architecture/send-fast-path.md, "1 KiB sends").
"""
# The buffer's size at the first read and after a large frame; a larger frame grows it to fit.
RECEIVE_BUFFER_INITIAL_BYTES = 64 * 1024
# The least free space offered to a read: below it the held bytes move to the start.
RECEIVE_READ_MIN_BYTES = RECEIVE_BUFFER_INITIAL_BYTES // 2
_FRAME_LENGTH_FIELD_BYTES = 4


class ReceiveBuffer:
    """``data[start:end]`` holds the received bytes not consumed yet."""

    __slots__ = ("data", "start", "end")

    def __init__(self):
        # Allocated at the first read: a connection that never sends holds no buffer.
        self.data = bytearray()
        self.start = 0      # first unconsumed byte
        self.end = 0        # end of the received bytes

    def free_view(self) -> memoryview:
        """The free space at the end, made large enough for the next read.

        Room is made here, not after the read: asyncio still holds the view it read into
        while the protocol's ``buffer_updated`` runs, and a bytearray with a live view cannot
        move."""
        if self.end or len(self.data) != RECEIVE_BUFFER_INITIAL_BYTES:
            self.make_room()        # else all of it is free: the common read needs no call
        return memoryview(self.data)[self.end:]

    def consumed_to(self, position: int) -> None:
        """Everything before ``position`` is consumed (back to the start when all of it is)."""
        if position == self.end:
            self.start = self.end = 0
        else:
            self.start = position

    def drop(self) -> None:
        """Give the memory back (the connection closed)."""
        self.data = bytearray()
        self.start = self.end = 0

    def make_room(self) -> None:
        """Room for the next read at the end (see the module docstring): nothing to do when
        there is room already. The reader in C (pybroker._fast.socket_reader) calls it as
        :meth:`free_view` does, then reads into ``data[end:]`` itself."""
        buffer = self.data
        held_bytes = self.end - self.start
        if held_bytes == 0 and len(buffer) > RECEIVE_BUFFER_INITIAL_BYTES:
            # A big frame is done: give the memory back instead of keeping it per connection.
            self.data = bytearray(RECEIVE_BUFFER_INITIAL_BYTES)
            self.start = self.end = 0
            return
        wanted_bytes = RECEIVE_READ_MIN_BYTES
        if held_bytes >= _FRAME_LENGTH_FIELD_BYTES:
            # The receive loop's taker has already checked this length field against
            # frame_max_bytes.
            announced = int.from_bytes(buffer[self.start:self.start + 4], "big")
            # Room for the rest of the frame, but at most doubling per read: the memory a peer
            # makes us hold follows the bytes it really sent, not the length it announced.
            wanted_bytes = max(wanted_bytes, min(announced + 4 - held_bytes, len(buffer)))
        if len(buffer) - self.end >= wanted_bytes:
            return
        if len(buffer) - held_bytes >= wanted_bytes:
            buffer[:held_bytes] = buffer[self.start:self.end]
        else:
            grown = bytearray(max(held_bytes + wanted_bytes, RECEIVE_BUFFER_INITIAL_BYTES))
            grown[:held_bytes] = buffer[self.start:self.end]
            self.data = grown
        self.start, self.end = 0, held_bytes
