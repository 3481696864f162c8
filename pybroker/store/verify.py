# `pybroker store verify`: the scrubber's pass over a stopped broker's store, at full speed.
"""Verify a whole store offline and, when asked, rebuild its derived files (docs/reliability.md).

The store must not be in use (its lock is taken for the duration). The checks are the
scrubber's (:mod:`pybroker.store.scrub`): every CommitLog file's size, every record's layout,
body CRC and own offset, no file missing, every consume-queue unit pointing at its own record;
and the CommitLog's data must reach the flushed offset the checkpoint records. The result is a
list of damaged places (one line each) and an exit status: 0 nothing damaged, 1 damage found,
2 the store could not be verified (in use, not a store).

``repair_derived``: consume queues and index files are deleted and rebuilt from the CommitLog
(the start-up code does it: recovery, then dispatch from the oldest record), so a queue of a
topic deleted meanwhile comes back with its records. Refused while the CommitLog itself has
damage that recovery would refuse to start with.
"""
import dataclasses
import os
import shutil
from collections.abc import Callable

from pybroker import clock
from pybroker.errors import StoreCorruptError
from pybroker.store import lock_file, paths, recovery
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.message_store import MessageStore
from pybroker.store.read_only_store import MessageStoreReader
from pybroker.store.scrub import COMMITLOG, PHASE_DONE, Scrubber, ScrubState
from pybroker.store.settings import StoreConfig

__all__ = ["verify_store", "settings_for", "EXIT_CLEAN", "EXIT_DAMAGED", "EXIT_UNVERIFIED"]

EXIT_CLEAN, EXIT_DAMAGED, EXIT_UNVERIFIED = 0, 1, 2
_STEP_BYTES = 64 << 20


def settings_for(store_root: str, base: StoreConfig | None = None) -> StoreConfig:
    """``base`` (a broker.conf's store settings) pointed at ``store_root``; without one, the
    file sizes are read from the files on disk (CommitLog, consume queue)."""
    settings = base if base is not None else StoreConfig()
    overrides: dict = {"store_path_root_dir": store_root, "store_path_commit_log": None}
    if base is None:
        commitlog_sizes = _file_sizes(paths.commitlog_dir(store_root))
        if commitlog_sizes:
            overrides["mapped_file_size_commit_log"] = max(commitlog_sizes,
                                                           key=commitlog_sizes.count)
        queue_sizes = [size for directory, _, names in
                       os.walk(paths.consume_queue_root(store_root))
                       for size in _file_sizes(directory, names)]
        if queue_sizes:
            overrides["mapped_file_size_consume_queue"] = max(queue_sizes,
                                                              key=queue_sizes.count)
    return dataclasses.replace(settings, **overrides)


def _file_sizes(directory: str, names=None) -> list[int]:
    try:
        names = os.listdir(directory) if names is None else names
    except FileNotFoundError:
        return []
    return [os.path.getsize(os.path.join(directory, name)) for name in names
            if len(name) == 20 and name.isdigit()]


def verify_store(settings: StoreConfig, repair_derived: bool,
                 say: Callable[[str], None]) -> int:
    """Verify the store of ``settings``; ``say(line)`` gets every line of the result.
    Returns the exit status (module docstring)."""
    root = settings.store_path_root_dir
    if not os.path.isdir(paths.commitlog_dir(root)):
        say(f"{root}: not a store (no commitlog directory)")
        return EXIT_UNVERIFIED
    lock = lock_file.StoreLock(root)
    try:
        lock.acquire()
    except lock_file.StoreLockedError as error:
        say(f"{root}: {error}: stop the broker first")
        return EXIT_UNVERIFIED
    try:
        damage, commitlog_damage = _verify(settings, say)
        if repair_derived and commitlog_damage:
            say("consume queues and index not rebuilt: the CommitLog is damaged, and a start "
                "refuses until its files are restored or skipDamagedRecordsOnRecover=true")
        elif repair_derived:
            return _repair_derived(settings, lock, damage - commitlog_damage, say)
        return EXIT_DAMAGED if damage else EXIT_CLEAN
    finally:
        lock.release()


def _verify(settings: StoreConfig, say: Callable[[str], None]) -> tuple[int, int]:
    """Every check; returns how many damaged places were found (each said), and how many of
    them in the CommitLog (known skipped ranges excepted)."""
    root = settings.store_path_root_dir
    try:
        recovery.check_file_sizes(settings.commitlog_dir, settings.mapped_file_size_commit_log,
                                  False)
    except StoreCorruptError as error:
        say(f"damaged: {error}")
        return 1, 1
    files_end = _files_end(settings)
    reader = MessageStoreReader(settings, dispatched_position=files_end)
    reader.advance(files_end, files_end)
    state = ScrubState()
    scrubber = Scrubber(reader, state, clock.now_ms, at_data_end=True)
    scrubber.start_pass()
    try:
        while state.phase != PHASE_DONE:
            scrubber.step(files_end, _STEP_BYTES)
    finally:
        reader.close()
    for finding in state.findings:
        say(f"damaged: {finding.text()}")
    damage = len(state.findings)
    commitlog_damage = sum(1 for f in state.findings if f.kind == COMMITLOG)
    data_end = scrubber.data_end if scrubber.data_end is not None else files_end
    flushed_end = _flushed_end(root)
    if flushed_end is not None and data_end < flushed_end:
        say(f"damaged: the CommitLog's data ends at physical offset {data_end}, but the "
            f"checkpoint records it flushed up to {flushed_end}")
        damage, commitlog_damage = damage + 1, commitlog_damage + 1
    say(f"verified {state.verified_bytes} bytes of {root}: CommitLog data to physical offset "
        f"{data_end}" + (f" (checkpoint: flushed to {flushed_end})"
                         if flushed_end is not None else "")
        + f", {len(state.queues)} consume queue(s); {damage} damaged place(s), "
          f"{commitlog_damage} in the CommitLog")
    return damage, commitlog_damage


def _files_end(settings: StoreConfig) -> int:
    names = sorted(n for n in os.listdir(settings.commitlog_dir) if len(n) == 20 and n.isdigit())
    return int(names[-1]) + settings.mapped_file_size_commit_log if names else 0


def _flushed_end(root: str) -> int | None:
    path = paths.checkpoint_path(root)
    if not os.path.exists(path):
        return None
    checkpoint = StoreCheckpoint(path, read_only=True)
    try:
        return checkpoint.flushed_end()
    finally:
        checkpoint.close()


def _repair_derived(settings: StoreConfig, lock, damage: int,
                    say: Callable[[str], None]) -> int:
    root = settings.store_path_root_dir
    for directory in (paths.consume_queue_root(root), paths.index_dir(root)):
        if os.path.isdir(directory):
            shutil.rmtree(directory)
    state = ScrubState.load(root)
    state.findings = [f for f in state.findings if f.kind == COMMITLOG]
    state.save(root)
    store = MessageStore(settings, lock=lock)
    try:
        if not store.load():
            say("consume queues and index not rebuilt: a store file could not be loaded")
            return EXIT_DAMAGED
    except StoreCorruptError as error:
        say(f"consume queues and index deleted but not rebuilt: the CommitLog is damaged "
            f"({error}); they are rebuilt at the next start that recovers it")
        return EXIT_DAMAGED
    store.shutdown()
    say(f"consume queues and index rebuilt from the CommitLog ({store.dispatcher.dispatched_total}"
        f" records dispatched)")
    return EXIT_DAMAGED if damage else EXIT_CLEAN
