# Python face of pybroker._fast.send.complete (SendPath, send/take.pyi, inherits it).

class SendCompletions:
    slave_not_available_total: int
    completed_up_to: int

    def open_slot(self, born_ip: bytes, born_port: int) -> int:
        """A slot for a new connection."""
    def close_slot(self, slot: int) -> None:
        """The slot's connection closed: answers still due to it are dropped."""
    @property
    def has_room(self) -> bool: ...
    @property
    def inflight(self) -> int: ...
    def drain(self, now: float, replicated_position: int = 0,
              slaves_connected: int = 0) -> list[tuple[int, int, bool, int, int, int, int]]:
        """Answer (or hold) completions; the Python path's puts answered now: (request_id,
        status code, stored, count, physical_offset, queue_offset, records_bytes)."""
    def release(self, flushed_position: int,
                replicated_position: int) -> list[tuple[int, int, bool, int, int, int, int]]:
        """Answer held acknowledgements the positions cover (the Python path's returned)."""
    def expire(self, flushed_position: int, replicated_position: int,
               now: float) -> list[tuple[int, int, bool, int, int, int, int]]:
        """release(), then answer held acknowledgements past their deadline."""
    def aged(self, limit: float, after_id: int) -> int:
        """Highest id above after_id of a put (either path) waiting since limit; 0."""
    def oldest(self, after_id: int) -> float | None:
        """Monotonic s the longest-waiting put above after_id started waiting, or None."""
    @property
    def waiting(self) -> int: ...
    def withdraw(self, taken: int, up_to: int, busy_status: int
                 ) -> tuple[int, list[tuple[int, int, float]], list[tuple[int, float]]]:
        """Withdraw the puts in (taken, up_to]: (count, [(slot, opaque, started)] of the fast
        sends to answer, [(request_id, started)] of the Python path's)."""
    @property
    def flush_target(self) -> int | None: ...
    @property
    def replica_target(self) -> int | None: ...
    @property
    def held_deadline(self) -> float | None: ...
    @property
    def held_count(self) -> int: ...
    def fast_oldest_ms(self) -> int:
        """Epoch ms of the oldest unanswered fast send, 0 when none."""
    def set_slot_fd(self, slot: int, fd: int) -> None:
        """The socket send_outputs may write the slot's answers to itself, or -1."""
    def send_outputs(self) -> list[tuple[int, bytes]]:
        """Each connection's answers since the last call sent to its socket (set_slot_fd);
        (slot, response frames) of the rest, per connection."""
