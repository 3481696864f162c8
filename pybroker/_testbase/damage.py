# Random single damages to a store built by real sends, and what each restart does with them.
"""The machinery of the seeded damage property (issue #22 item 4) and its fault table.

:func:`build_store` sends messages through a real ``pybroker standalone`` (SYNC_FLUSH, small
files, four queues, keys for the index), records every acknowledged message (queue, queue
offset, body, CommitLog offset and size) and keeps two snapshots of the store: after a
``kill -9`` (abort file present, the allocator's ready files left) and after a clean restart
and stop. :func:`make_case` copies one snapshot and applies one damage to one file of one
kind; :func:`evaluate` restarts through the broker's own code in this process (the metadata
documents loaded as the supervisor loads them, then :class:`MessageStore` recovery and
dispatch) and reads every queue back; :func:`evaluate_with_broker` does the same with a real
broker process and pulls over the wire. A restart must either refuse naming the damaged file or
serve every acknowledged message the damage did not itself destroy (whose record bytes it did
not touch), each at its own queue offset with its own body - never less, never a crash.
:class:`FaultTable` sums the outcomes per damage kind and file kind.
"""
import dataclasses
import os
import random
import shutil

from pybroker._fast import record as record_codec
from pybroker.errors import StoreCorruptError
from pybroker.store import config_docs, paths
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig

__all__ = ["BuiltStore", "Case", "Outcome", "FaultTable", "build_store", "make_case",
           "evaluate", "evaluate_with_broker", "run_cases", "DAMAGE_KINDS", "FILE_KINDS"]

TOPIC = "DamagePropertyTopic"
QUEUES = 4
DAMAGE_KINDS = ("bit flip", "zeroed 4 bytes", "zeroed 512 bytes", "truncation", "removed file")
FILE_KINDS = ("CommitLog", "ConsumeQueue", "IndexFile", "checkpoint", "abort", "config JSON")
STORE_OVERRIDES = {
    "flushDiskType": "SYNC_FLUSH",
    "mappedFileSizeCommitLog": str(64 * 1024),
    "mappedFileSizeConsumeQueue": str(48 * 20),
    "maxMessageSize": str(16 * 1024),
    "maxHashSlotNum": "64",
    "maxIndexNum": "300",
    "storeScrubRateMegabytesPerSecond": "0",
}
_CONFIG_LOADERS = {paths.TOPICS_CONFIG: config_docs.load_topics,
                   paths.CONSUMER_OFFSET_CONFIG: config_docs.load_consumer_offsets,
                   paths.SUBSCRIPTION_GROUP_CONFIG: config_docs.load_subscription_groups,
                   paths.DELAY_OFFSET_CONFIG: config_docs.load_delay_offsets}


@dataclasses.dataclass(frozen=True)
class Acked:
    """One acknowledged message."""
    queue_id: int
    queue_offset: int
    body: bytes
    physical_offset: int
    size: int


@dataclasses.dataclass
class BuiltStore:
    """Two snapshots of one store and what was acknowledged into it."""
    snapshots: dict[str, str]          # "killed" / "clean" -> store directory
    acked: list[Acked]
    settings: StoreConfig              # of the snapshots (root to be replaced per case)


@dataclasses.dataclass
class Case:
    number: int
    snapshot: str
    file_kind: str
    damage_kind: str
    path: str                          # the damaged file, in the case's store
    start: int                         # damaged byte range [start, end) in that file
    end: int
    store_root: str

    def describe(self) -> str:
        return (f"case {self.number}: {self.damage_kind} in {self.file_kind} "
                f"{os.path.relpath(self.path, self.store_root)} [{self.start}, {self.end}) "
                f"of the {self.snapshot} snapshot")


@dataclasses.dataclass
class Outcome:
    refused: bool
    message: str = ""
    served: int = 0
    destroyed: int = 0                 # acknowledged messages the damage itself hit
    lost: list = dataclasses.field(default_factory=list)     # acked, not destroyed, not served
    wrong: list = dataclasses.field(default_factory=list)    # served with other bytes

    def problems(self, case: Case) -> list[str]:
        """Why this outcome breaks the property (empty when it holds)."""
        found = []
        name = os.path.basename(case.path)
        if self.refused and name not in self.message:
            found.append(f"refused without naming {name}: {self.message}")
        if self.refused and case.file_kind not in ("CommitLog", "config JSON"):
            found.append(f"refused for a derived file: {self.message}")
        if self.lost:
            found.append(f"{len(self.lost)} acknowledged message(s) lost: {self.lost[:5]}")
        if self.wrong:
            found.append(f"{len(self.wrong)} message(s) served with other bytes: "
                         f"{self.wrong[:5]}")
        return found


# --- the store ----------------------------------------------------------------------------------

def store_settings(store_root: str) -> StoreConfig:
    """The store settings of :data:`STORE_OVERRIDES` for ``store_root``."""
    return StoreConfig(store_path_root_dir=store_root,
                       mapped_file_size_commit_log=int(STORE_OVERRIDES["mappedFileSizeCommitLog"]),
                       mapped_file_size_consume_queue=int(
                           STORE_OVERRIDES["mappedFileSizeConsumeQueue"]),
                       max_message_size=int(STORE_OVERRIDES["maxMessageSize"]),
                       max_hash_slot_num=int(STORE_OVERRIDES["maxHashSlotNum"]),
                       max_index_num=int(STORE_OVERRIDES["maxIndexNum"]))


def build_store(work_dir: str, messages: int, rand: random.Random) -> BuiltStore:
    """Send ``messages`` through a real broker; snapshots after kill -9 and a clean stop."""
    from pybroker._testbase.cluster import StandaloneBroker
    from pybroker._testbase.damage_sends import commit_offsets, send_all
    broker = StandaloneBroker(os.path.join(work_dir, "builder"), STORE_OVERRIDES)
    snapshots = {}
    try:
        broker.start()
        sent = send_all(broker, TOPIC, QUEUES, messages, rand)
        commit_offsets(broker, TOPIC, QUEUES)
        broker.kill()
        snapshots["killed"] = os.path.join(work_dir, "killed")
        # run/ is runtime state (sockets, shared regions) a start recreates.
        shutil.copytree(broker.store_dir, snapshots["killed"],
                        ignore=shutil.ignore_patterns("run"))
        broker.start()
        assert broker.stop() == 0, "the builder broker did not stop cleanly"
        snapshots["clean"] = os.path.join(work_dir, "clean")
        shutil.copytree(broker.store_dir, snapshots["clean"])
    finally:
        broker.kill()
    acked = [Acked(queue_id, queue_offset, body, physical_offset,
                   _record_size(snapshots["clean"], physical_offset))
             for queue_id, queue_offset, body, physical_offset in sent]
    return BuiltStore(snapshots, acked, store_settings(snapshots["clean"]))


def _record_size(store_root: str, physical_offset: int) -> int:
    file_size = int(STORE_OVERRIDES["mappedFileSizeCommitLog"])
    base = physical_offset - physical_offset % file_size
    with open(os.path.join(paths.commitlog_dir(store_root), "%020d" % base), "rb") as file:
        data = file.read()
    status, size = record_codec.check(data, physical_offset - base, len(data), True)
    assert status == record_codec.RECORD_OK, f"no record at {physical_offset}"
    return size


# --- damage -------------------------------------------------------------------------------------

def _files_of_kind(store_root: str, file_kind: str) -> list[str]:
    def under(directory: str) -> list[str]:
        return sorted(os.path.join(parent, name) for parent, _, names in os.walk(directory)
                      for name in names)
    if file_kind == "CommitLog":
        return under(paths.commitlog_dir(store_root))
    if file_kind == "ConsumeQueue":
        return under(paths.consume_queue_root(store_root))
    if file_kind == "IndexFile":
        return under(paths.index_dir(store_root))
    if file_kind == "checkpoint":
        return [paths.checkpoint_path(store_root)]
    if file_kind == "abort":
        path = paths.abort_path(store_root)
        return [path] if os.path.exists(path) else []
    return [path for path in under(paths.config_dir(store_root)) if path.endswith(".json")]


def make_case(built: BuiltStore, number: int, rand: random.Random, cases_dir: str) -> Case:
    """Copy a snapshot and damage one file of it (``rand`` picks everything)."""
    file_kind = rand.choice(FILE_KINDS)
    damage_kind = rand.choice(DAMAGE_KINDS)
    snapshot = "killed" if file_kind == "abort" else rand.choice(sorted(built.snapshots))
    store_root = os.path.join(cases_dir, f"case-{number}")
    if os.path.exists(store_root):
        shutil.rmtree(store_root)
    shutil.copytree(built.snapshots[snapshot], store_root)
    path = rand.choice(_files_of_kind(store_root, file_kind))
    start, end = _damage(path, damage_kind, rand)
    return Case(number, snapshot, file_kind, damage_kind, path, start, end, store_root)


def _damage(path: str, damage_kind: str, rand: random.Random) -> tuple[int, int]:
    """Apply ``damage_kind`` to ``path``; the damaged byte range [start, end)."""
    size = os.path.getsize(path)
    if damage_kind == "removed file":
        os.unlink(path)
        return 0, size
    if damage_kind == "truncation":
        cut = rand.randrange(size) if size else 0
        os.truncate(path, cut)
        return cut, size
    width = {"bit flip": 1, "zeroed 4 bytes": 4, "zeroed 512 bytes": 512}[damage_kind]
    start = _damage_position(path, size, width, rand)
    with open(path, "r+b") as file:
        file.seek(start)
        old = file.read(width)
        file.seek(start)
        if damage_kind == "bit flip":
            file.write(bytes([(old[0] if old else 0) ^ (1 << rand.randrange(8))]))
        else:
            file.write(bytes(width))
    return start, start + width


def _damage_position(path: str, size: int, width: int, rand: random.Random) -> int:
    """Where a damage lands: a random byte of the file, more often one that holds data (the
    written part of a sparse store file is small; zeroing zeros damages nothing)."""
    if size <= width:
        return 0
    with open(path, "rb") as file:
        data = file.read()
    written = len(data.rstrip(b"\x00"))
    if written and rand.random() < 0.8:
        return rand.randrange(max(min(written, size - width), 1))
    return rand.randrange(size - width)


def _destroyed(built: BuiltStore, case: Case) -> set[tuple[int, int]]:
    """(queue, queue offset) of the acknowledged messages whose record bytes the damage hit."""
    if case.file_kind != "CommitLog":
        return set()
    base = int(os.path.basename(case.path))
    start, end = base + case.start, base + case.end
    return {(a.queue_id, a.queue_offset) for a in built.acked
            if a.physical_offset < end and start < a.physical_offset + a.size}


# --- restarts -----------------------------------------------------------------------------------

def evaluate(built: BuiltStore, case: Case) -> Outcome:
    """Restart in this process: metadata documents, then store recovery and dispatch; read
    every queue back. StoreCorruptError is a refusal; anything else raised is a crash (it
    propagates)."""
    for name, load in _CONFIG_LOADERS.items():
        try:
            load(paths.config_path(case.store_root, name))
        except StoreCorruptError as error:
            return Outcome(True, str(error))
    store = MessageStore(store_settings(case.store_root))
    try:
        if not store.load():
            raise AssertionError(f"{case.describe()}: the store was not loaded")
    except StoreCorruptError as error:
        return Outcome(True, str(error))
    try:
        served = {}
        for queue_id in range(QUEUES):
            served.update(_read_queue(store, queue_id))
    finally:
        store.shutdown()
    return _compare(built, case, served)


def _read_queue(store, queue_id: int) -> dict[tuple[int, int], bytes]:
    served, offset = {}, 0
    for _ in range(100_000):
        result = store.get_messages("damage_property", TOPIC, queue_id, offset, 32)
        with result:
            for buffer in result.buffers:
                message = record_codec.decode(buffer, 0)
                served[(queue_id, message.queue_offset)] = bytes(message.body)
            # Like a consumer: on at the next offset the answer names (found, moved, damaged),
            # done when it names the same one (the end of the queue).
            if result.next_begin_offset <= offset:
                return served
            offset = result.next_begin_offset
    raise AssertionError(f"queue {queue_id}: reading did not end")


def _compare(built: BuiltStore, case: Case, served: dict) -> Outcome:
    destroyed = _destroyed(built, case)
    outcome = Outcome(False, served=len(served), destroyed=len(destroyed))
    for acked in built.acked:
        key = (acked.queue_id, acked.queue_offset)
        body = served.get(key)
        if body is None and key not in destroyed:
            outcome.lost.append(key)
        elif body is not None and body != acked.body:
            outcome.wrong.append(key)
    return outcome


def evaluate_with_broker(built: BuiltStore, case: Case, work_dir: str) -> Outcome:
    """Restart a real broker on the damaged store: it exits 1 with one line naming the
    damage, or serves every queue over the wire (a topic its damaged topics.json lost is
    created again first, as an operator would)."""
    from pybroker._testbase.cluster import StandaloneBroker
    from pybroker._testbase.damage_sends import pull_all
    overrides = dict(STORE_OVERRIDES, storePathRootDir=case.store_root)
    broker = StandaloneBroker(work_dir, overrides)
    broker.store_dir = case.store_root
    offset = len(broker._log_text())
    try:
        try:
            broker.start()
        except RuntimeError as error:
            lines = [line for line in broker._log_text()[offset:].splitlines()
                     if "cannot start:" in line]
            if "exited with 1" in str(error) and len(lines) == 1:
                return Outcome(True, lines[0])
            raise
        served = pull_all(broker, TOPIC, QUEUES)
        assert broker.stop() == 0, "the broker did not stop cleanly"
    finally:
        broker.kill()
    return _compare(built, case, served)


class FaultTable:
    """Outcomes summed per (damage kind, file kind); :meth:`markdown` renders them."""

    def __init__(self):
        self.rows: dict[tuple[str, str], list[int]] = {}

    def add(self, case: Case, outcome: Outcome) -> None:
        row = self.rows.setdefault((case.damage_kind, case.file_kind), [0, 0, 0, 0, 0])
        row[0] += 1
        row[1 if outcome.refused else 2] += 1
        row[3] += outcome.destroyed
        row[4] += len(outcome.lost) + len(outcome.wrong)

    def markdown(self) -> str:
        lines = ["| damage | file | cases | refused | served | acked destroyed by the "
                 "damage | acked lost otherwise |", "|---|---|---|---|---|---|---|"]
        totals = [0, 0, 0, 0, 0]
        for damage_kind in DAMAGE_KINDS:
            for file_kind in FILE_KINDS:
                row = self.rows.get((damage_kind, file_kind))
                if row is None:
                    continue
                totals = [a + b for a, b in zip(totals, row, strict=True)]
                lines.append(f"| {damage_kind} | {file_kind} | " + " | ".join(map(str, row))
                             + " |")
        lines.append("| all | all | " + " | ".join(map(str, totals)) + " |")
        return "\n".join(lines)


def run_cases(built: BuiltStore, rand: random.Random, cases: int, broker_cases: int,
              work_dir: str) -> tuple[FaultTable, FaultTable, list[str]]:
    """``cases`` seeded cases restarted in this process, ``broker_cases`` of them (spread
    over the run, each with its own generator seeded from ``rand``'s seed and the case number)
    restarted through a real broker too; the two fault tables and every broken property."""
    table, broker_table = FaultTable(), FaultTable()
    problems: list[str] = []
    seed = getattr(rand, "seed_value", 0)
    every = max(cases // max(broker_cases, 1), 1)
    for number in range(cases):
        case = make_case(built, number, rand, os.path.join(work_dir, "cases"))
        outcome = evaluate(built, case)
        table.add(case, outcome)
        problems += [f"{case.describe()}: {problem}" for problem in outcome.problems(case)]
        shutil.rmtree(case.store_root)
        if broker_cases and number % every == every // 2:
            broker_cases -= 1
            fresh = make_case(built, number, random.Random(seed * 1_000_003 + number),
                              os.path.join(work_dir, "broker"))
            outcome = evaluate_with_broker(built, fresh,
                                           os.path.join(work_dir, f"broker-run-{number}"))
            broker_table.add(fresh, outcome)
            problems += [f"{fresh.describe()} (real broker): {problem}"
                         for problem in outcome.problems(fresh)]
            shutil.rmtree(fresh.store_root)
    return table, broker_table, problems
