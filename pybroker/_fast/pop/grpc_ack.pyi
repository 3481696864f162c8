# Python face of pybroker._fast.pop.grpc_ack (grpc_service/front_acks.py uses it).

FRAME_VALUES: tuple[str, ...]

def parse_handle(text: str) -> tuple[int, int, int, int, str, str, int, int, int] | None:
    """``(start_offset, retrieve_time, invisible_time, revive_queue_id, retry, broker_name,
    queue_id, offset, commit_log_offset)``, or None where ``consumer.decode_handle`` refuses."""

class AckFrames:
    """ACK_MESSAGE request frames of gRPC receipt handles (front_acks.ack_frame_template)."""

    def __init__(self, pieces: tuple[bytes, ...], order: tuple[int, ...],
                 frame_max_bytes: int) -> None: ...
    def add(self, out: bytearray, text: str, topics: tuple[bytes | None, ...], group: bytes,
            opaque: int) -> tuple[int, int] | None:
        """Append the frame of the ack of ``text``: ``(retrieve_time, invisible_time)``, or
        None (nothing appended)."""
