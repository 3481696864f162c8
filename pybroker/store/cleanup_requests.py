# Cleanup asked for by an admin (mqadmin deleteExpiredCommitLog, cleanExpiredCQ), handed from
# the metadata service to the dispatcher, which owns the cleanup.
"""Admin cleanup requests: ``<store>/run/cleanup-requests``, one line per request.

The metadata service (supervisor) appends a line naming the request; the dispatcher, the
only process that deletes store files, reads the lines added since its last look at its next
cleanup pass (every ``cleanResourceInterval`` ms, 10 s by default) and acts on them:

* ``deleteExpiredCommitLog`` (Java's executeDeleteFilesManually): the next
  :data:`MANUAL_DELETE_PASSES` passes delete expired CommitLog files (older than
  ``fileReservedTime``) even outside the ``deleteWhen`` hours.
* ``cleanExpiredConsumeQueue``: that pass deletes every consume-queue file whose units all
  point below the CommitLog's first offset, whether or not that offset moved since the last
  pass (the last file of a queue stays: its queue offsets go on).

The supervisor removes the file when the broker stops.
"""
import os

from pybroker.store import paths

__all__ = ["requests_path", "DELETE_EXPIRED_COMMITLOG", "CLEAN_EXPIRED_CONSUME_QUEUE",
           "MANUAL_DELETE_PASSES", "request_cleanup", "CleanupRequestReader"]

DELETE_EXPIRED_COMMITLOG = "deleteExpiredCommitLog"
CLEAN_EXPIRED_CONSUME_QUEUE = "cleanExpiredConsumeQueue"
MANUAL_DELETE_PASSES = 20           # Java's MAX_MANUAL_DELETE_FILE_TIMES
_KINDS = frozenset({DELETE_EXPIRED_COMMITLOG, CLEAN_EXPIRED_CONSUME_QUEUE})
_FILE_NAME = "cleanup-requests"


def requests_path(store_root: str) -> str:
    return os.path.join(paths.run_dir(store_root), _FILE_NAME)


def request_cleanup(store_root: str, kind: str) -> None:
    """Append a request (one short line, a single write with O_APPEND)."""
    if kind not in _KINDS:
        raise ValueError(f"unknown cleanup request {kind!r}")
    os.makedirs(paths.run_dir(store_root), exist_ok=True)
    fd = os.open(requests_path(store_root), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{kind}\n".encode())
    finally:
        os.close(fd)


class CleanupRequestReader:
    """The dispatcher's side: the requests appended since the last :meth:`take` (the first
    take: since the reader was made, so a restarted dispatcher does not act on old ones)."""

    def __init__(self, store_root: str):
        self.path = requests_path(store_root)
        try:
            self.position = os.path.getsize(self.path)
        except OSError:
            self.position = 0

    def take(self) -> set[str]:
        """The kinds requested since the last call (an absent file: none)."""
        try:
            with open(self.path, "rb") as source:
                source.seek(self.position)
                data = source.read()
        except FileNotFoundError:
            return set()
        complete = data[:data.rfind(b"\n") + 1]
        self.position += len(complete)
        return {line for line in complete.decode("utf-8", "replace").splitlines()
                if line in _KINDS}
