# TCP relay on 127.0.0.1 that records every RocketMQ remoting frame, per direction, as JSON lines.
"""Capture proxy: sits between a RocketMQ client and a NameServer or broker (loopback only).

Each complete frame (split by its 4-byte big-endian length) is written to a JSON-lines file as
``{"t": unix_seconds, "conn": n, "dir": "c2s"|"s2c", "code": .., "flag": .., "opaque": ..,
"serialize_type": 0|1, "len": frame_bytes, "hex": "<whole frame incl. length>"}``. The recorded
bytes are always the ones the sender sent. Optionally the relay rewrites byte strings in
server->client frames (``rewrites``), e.g. a broker address inside a route answer, so that a client
is steered through a second proxy; the recorded frame is the original, never the rewritten one.

Usage: ``python tools/capture_proxy.py --listen-port P --target-port Q --out frames.jsonl
[--rewrite 127.0.0.1:10911=127.0.0.1:20911]``.
"""
import argparse
import asyncio
import json
import struct
import threading
import time

LOOPBACK = "127.0.0.1"
FRAME_MAX_BYTES = 16 * 1024 * 1024  # Java's default frameMaxLength
READ_CHUNK_BYTES = 64 * 1024


def describe_frame(frame: bytes) -> dict:
    """Decode code/flag/opaque of a whole frame (length prefix included); {} if unreadable."""
    if len(frame) < 8:
        return {}
    header_word = struct.unpack_from(">i", frame, 4)[0]
    serialize_type = (header_word >> 24) & 0xFF
    header_len = header_word & 0xFFFFFF
    header = frame[8:8 + header_len]
    info = {"serialize_type": serialize_type, "header_len": header_len}
    if serialize_type == 0:
        try:
            fields = json.loads(header.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return info
        for key in ("code", "flag", "opaque"):
            if key in fields:
                info[key] = fields[key]
    elif serialize_type == 1 and len(header) >= 13:
        code, _language, _version, opaque, flag = struct.unpack_from(">hBhii", header, 0)
        info.update(code=code, opaque=opaque, flag=flag)
    return info


def apply_rewrites(frame: bytes, rewrites: list[tuple[bytes, bytes]]) -> bytes:
    """Replace byte strings in a frame's body (never its header) and fix the length prefix."""
    header_len = struct.unpack_from(">i", frame, 4)[0] & 0xFFFFFF
    head = frame[4:8 + header_len]
    body = frame[8 + header_len:]
    for old, new in rewrites:
        body = body.replace(old, new)
    return struct.pack(">i", len(head) + len(body)) + head + body


class FrameRecorder:
    """Appends frames to a JSON-lines file; thread-safe, flushed per line."""

    def __init__(self, path):
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def record(self, connection_id: int, direction: str, frame: bytes) -> None:
        entry = {"t": round(time.time(), 6), "conn": connection_id, "dir": direction}
        entry.update(describe_frame(frame))
        entry["len"] = len(frame)
        entry["hex"] = frame.hex()
        line = json.dumps(entry, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def switch(self, path) -> None:
        """Close the current file and append to path from now on."""
        with self._lock:
            self._file.close()
            self._file = open(path, "a", encoding="utf-8")

    def close(self) -> None:
        with self._lock:
            self._file.close()


async def _pump(reader, writer, owner, connection_id, direction, rewrites):
    """Copy frames from reader to writer, recording each; stop at EOF or a bad length."""
    buffer = bytearray()
    try:
        while True:
            chunk = await reader.read(READ_CHUNK_BYTES)
            if not chunk:
                break
            buffer += chunk
            while len(buffer) >= 4:
                frame_len = struct.unpack_from(">i", buffer, 0)[0]
                if frame_len < 4 or frame_len > FRAME_MAX_BYTES:
                    raise ValueError(f"bad frame length {frame_len} ({direction})")
                if len(buffer) < 4 + frame_len:
                    break
                frame = bytes(buffer[:4 + frame_len])
                del buffer[:4 + frame_len]
                owner.record(connection_id, direction, frame)
                writer.write(apply_rewrites(frame, rewrites) if rewrites else frame)
            await writer.drain()
    except (ConnectionError, ValueError):
        pass
    finally:
        writer.close()


class CaptureProxy:
    """A loopback relay listen_port -> target_port in a background thread (start/stop)."""

    def __init__(self, listen_port: int, target_port: int, out_path, rewrites=()):
        self.listen_port = listen_port
        self.target_port = target_port
        self._recorder = FrameRecorder(out_path)
        self._rewrites = [(old.encode(), new.encode()) for old, new in rewrites]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"capture-proxy-{listen_port}")
        self._server = None
        self._connections = 0

    async def _handle(self, client_reader, client_writer):
        self._connections += 1
        connection_id = self._connections
        try:
            server_reader, server_writer = await asyncio.open_connection(LOOPBACK,
                                                                         self.target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            _pump(client_reader, server_writer, self, connection_id, "c2s", []),
            _pump(server_reader, client_writer, self, connection_id, "s2c", self._rewrites))

    def record(self, connection_id: int, direction: str, frame: bytes) -> None:
        self._recorder.record(connection_id, direction, frame)

    def set_output(self, out_path) -> None:
        """Send frames recorded from now on to another file (one file per capture phase)."""
        self._recorder.switch(out_path)

    def start(self) -> "CaptureProxy":
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, LOOPBACK, self.listen_port), self._loop)
        self._server = future.result(timeout=10)
        return self

    def stop(self) -> None:
        """Close the listener and every relayed connection, then the loop and the file."""
        async def _close():
            self._server.close()
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0)    # the closed transports release their sockets
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(_close(), self._loop).result(timeout=10)
            self._server = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._loop.is_closed() and not self._loop.is_running():
            self._loop.close()
        self._recorder.close()

    def __enter__(self) -> "CaptureProxy":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--out", required=True, help="JSON-lines file (appended)")
    parser.add_argument("--rewrite", action="append", default=[],
                        help="OLD=NEW byte string replaced in server->client frames")
    args = parser.parse_args(argv)
    rewrites = [tuple(item.split("=", 1)) for item in args.rewrite]
    proxy = CaptureProxy(args.listen_port, args.target_port, args.out, rewrites).start()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
