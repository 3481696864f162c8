# The recording file: JSON lines, one header, one line per sample, one end line.
"""Write and read ``pybroker prof record`` files (format: docs/profiling.md, "Recording format").

Line 1 ``{"kind": "header", "format": "pybroker-prof", "version": 1, ...}`` (broker, machine,
settings), then ``{"kind": "sample", ...}`` once per second, then ``{"kind": "end", ...}``
when the recorder stopped cleanly. Counters and histograms in samples are cumulative since
the broker started (a reader takes differences between samples); residency, positions and
memory figures are the state at the sample's time. A recording cut short (the recorder was
killed) is still readable: the reader ignores a torn last line.
"""
import dataclasses
import os
import time
from collections.abc import Iterator

import orjson

from pybroker.prof.sampler import Sampler

__all__ = ["FORMAT", "VERSION", "Recording", "record", "read_recording"]

FORMAT = "pybroker-prof"
VERSION = 1


@dataclasses.dataclass
class Recording:
    """A recording read back: its header, samples (oldest first) and end line (or None)."""
    header: dict
    samples: list[dict]
    end: dict | None
    path: str = ""

    @property
    def name(self) -> str:
        return os.path.basename(self.path) or "recording"


def _lines(path: str) -> Iterator[dict]:
    with open(path, "rb") as source:
        for number, line in enumerate(source, 1):
            if not line.strip():
                continue
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                if source.read(1):
                    raise ValueError(f"{path}:{number}: not a JSON line") from None
                return        # a torn last line: the recorder was stopped mid-write


def read_recording(path: str) -> Recording:
    """Read a recording; ValueError when the file is not one (or a newer version)."""
    lines = _lines(path)
    header = next(lines, None)
    if not header or header.get("kind") != "header" or header.get("format") != FORMAT:
        raise ValueError(f"{path} is not a pybroker prof recording")
    if header.get("version", 0) > VERSION:
        raise ValueError(f"{path} is a version {header['version']} recording; this pybroker "
                         f"reads version {VERSION}")
    samples, end = [], None
    for line in lines:
        if line.get("kind") == "sample":
            samples.append(line)
        elif line.get("kind") == "end":
            end = line
    return Recording(header, samples, end, path)


def record(sampler: Sampler, path: str, duration_s: float, interval_s: float = 1.0,
           stop=lambda: False, on_sample=None) -> int:
    """Sample every ``interval_s`` for ``duration_s`` (or until ``stop()``) into ``path``;
    returns the number of samples. Each line is flushed as it is written."""
    started = time.monotonic()
    count = 0
    with open(path, "wb") as out:
        header = {"kind": "header", "format": FORMAT, "version": VERSION,
                  "started_ms": time.time_ns() // 1_000_000, "interval_s": interval_s,
                  **sampler.header()}
        out.write(orjson.dumps(header) + b"\n")
        reason = "duration"
        while True:
            try:
                sample = sampler.sample()
            except (FileNotFoundError, ValueError) as error:
                reason = f"broker gone: {error}"
                break
            out.write(orjson.dumps({"kind": "sample", **sample}) + b"\n")
            out.flush()
            count += 1
            if on_sample is not None:
                on_sample(sample)
            next_at = started + count * interval_s
            if next_at - started >= duration_s:
                break
            while not stop() and time.monotonic() < next_at:
                time.sleep(min(0.05, max(next_at - time.monotonic(), 0)))
            if stop():
                reason = "stopped"
                break
        out.write(orjson.dumps({"kind": "end", "samples": count, "reason": reason,
                                "ended_ms": time.time_ns() // 1_000_000}) + b"\n")
    return count
