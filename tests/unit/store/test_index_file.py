"""Goal: IndexFile bytes follow protocol.md §4.5 and IndexService answers key queries like a plain
model.

Method: tiny slot/entry counts on real temp files force hash-slot collisions and file rolls;
query results are compared with a dict-of-lists oracle over random keys and time ranges; the
raw file bytes are decoded with struct at the reference's positions; files are reopened,
deleted by checkpoint time and expired by commit-log offset.
"""
import os
import struct

import pytest

from pybroker._fast.jhash import index_key_hash
from pybroker.protocol.constants import MessageSysFlag
from pybroker.store import layout
from pybroker.store.index_file import IndexFile, IndexService, index_file_name

BASE_MS = 1_700_000_000_000


def test_file_layout_bytes(tmp_path):
    path = str(tmp_path / "idx")
    slots, entries = 7, 10
    index_file = IndexFile(path, slots, entries)
    assert os.path.getsize(path) == 40 + 4 * slots + 20 * entries
    assert index_file.index_count == 1 and index_file.hash_slot_count == 0
    assert index_file.put_key("T#a", 100, BASE_MS + 5_500)
    assert index_file.put_key("T#a", 200, BASE_MS + 9_000)
    index_file.flush()
    index_file.close()
    with open(path, "rb") as file:
        data = file.read()
    begin_ts, end_ts, begin_phy, end_phy, slot_count, count = struct.unpack_from(">qqqqii", data)
    assert (begin_ts, end_ts, begin_phy, end_phy) == (BASE_MS + 5_500, BASE_MS + 9_000, 100, 200)
    assert (slot_count, count) == (1, 3)
    key_hash = index_key_hash("T#a")
    slot = struct.unpack_from(">i", data, 40 + 4 * (key_hash % slots))[0]
    assert slot == 2                                   # newest entry of the chain
    first = struct.unpack_from(">iqii", data, 40 + 4 * slots + 20 * 1)
    second = struct.unpack_from(">iqii", data, 40 + 4 * slots + 20 * 2)
    assert first == (key_hash, 100, 0, 0)
    assert second == (key_hash, 200, 3, 1)             # 3.5 s truncated to 3, prev = entry 1
    assert data[40 + 4 * slots: 40 + 4 * slots + 20] == bytes(20)   # entry 0 never used


def test_file_full_and_reload(tmp_path):
    path = str(tmp_path / "idx")
    index_file = IndexFile(path, 3, 4)
    accepted = [index_file.put_key(f"T#{i}", i, BASE_MS + i * 1000) for i in range(5)]
    assert accepted == [True, True, True, False, False]   # entries 1..3 of max_index_num 4
    assert index_file.is_write_full()
    index_file.close()
    reopened = IndexFile(path, 3, 4)
    assert reopened.index_count == 4 and reopened.end_phy_offset == 2
    assert reopened.select("T#1", 10, 0, 2**62) == [1]
    reopened.close()


def test_colliding_hashes_are_all_returned(tmp_path):
    # "Aa" and "BB" have the same Java hashCode, so "T#Aa" and "T#BB" do too.
    assert index_key_hash("T#Aa") == index_key_hash("T#BB")
    index_file = IndexFile(str(tmp_path / "idx"), 1, 20)   # one slot: every key collides
    for phy, key in enumerate(["T#Aa", "T#x", "T#BB", "T#y", "T#Aa"]):
        index_file.put_key(key, phy, BASE_MS + phy * 1000)
    assert index_file.select("T#Aa", 10, 0, 2**62) == [4, 2, 0]
    assert index_file.select("T#x", 10, 0, 2**62) == [1]
    assert index_file.select("T#Aa", 2, 0, 2**62) == [4, 2]
    assert index_file.select("T#zzz", 10, 0, 2**62) == []
    assert index_file.hash_slot_count == 1
    index_file.close()


def test_time_range_filter(tmp_path):
    index_file = IndexFile(str(tmp_path / "idx"), 5, 50)
    for i in range(10):
        index_file.put_key("T#k", i, BASE_MS + i * 1000)
    select = index_file.select
    assert select("T#k", 50, BASE_MS + 3000, BASE_MS + 6000) == [6, 5, 4, 3]
    assert select("T#k", 50, BASE_MS + 9500, BASE_MS + 20_000) == []
    assert select("T#k", 50, 0, BASE_MS) == [0]
    assert index_file.is_time_matched(BASE_MS - 10, BASE_MS + 100_000)
    assert not index_file.is_time_matched(BASE_MS + 10_000, BASE_MS + 20_000)
    index_file.close()


class Oracle:
    """Plain model of the index: key -> [(phy_offset, store_timestamp)] in insertion order."""

    def __init__(self):
        self.entries: dict[str, list[tuple[int, int]]] = {}

    def add(self, key, phy, ts):
        self.entries.setdefault(key, []).append((phy, ts))

    def query(self, key, max_num, begin_ms, end_ms):
        hits = [phy for phy, ts in reversed(self.entries.get(key, [])) if begin_ms <= ts <= end_ms]
        return hits[:max_num]


def _fill(service, oracle, rand, count):
    keys = [f"k{i}" for i in range(12)]
    for position in range(count):
        phy = position * 100
        ts = BASE_MS + position * 1000      # whole seconds: stored time diffs are exact
        chosen = rand.sample(keys, rand.randint(0, 3))
        uniq = f"U{position:06d}"
        assert service.build_index("T", " ".join(chosen) + "  ", uniq, phy, ts) == len(chosen) + 1
        for key in chosen + [uniq]:
            oracle.add(key, phy, ts)


def _check(service, oracle, rand, probes=60):
    for _ in range(probes):
        key = rand.choice(list(oracle.entries))
        begin = BASE_MS + rand.randint(-5, 200) * 1000
        end = begin + rand.randint(0, 150) * 1000
        max_num = rand.randint(1, 40)
        phys, _, _ = service.query("T", key, max_num, begin, end)
        assert phys == oracle.query(key, max_num, begin, end), (key, begin, end, max_num)


def test_service_against_oracle_with_rolls_and_reload(tmp_path, rand):
    directory = str(tmp_path / "index")
    service = IndexService(directory, max_hash_slot_num=5, max_index_num=17)
    oracle = Oracle()
    _fill(service, oracle, rand, 150)
    assert len(service.index_files) > 5               # rolled many times
    names = [f.file_name for f in service.index_files]
    assert names == sorted(names) and all(len(n) == 17 and n.isdigit() for n in names)
    _check(service, oracle, rand)
    phys, last_ts, last_phy = service.query("T", "U000149", 5, 0, 2**62)
    assert phys == [14_900] and (last_ts, last_phy) == (BASE_MS + 149_000, 14_900)
    service.flush()
    service.close()
    reopened = IndexService(directory, max_hash_slot_num=5, max_index_num=17, read_only=True)
    assert reopened.load()
    assert [f.file_name for f in reopened.index_files] == names
    _check(reopened, oracle, rand)
    reopened.close()


def test_rolled_file_is_seeded_from_previous(tmp_path):
    service = IndexService(str(tmp_path), max_hash_slot_num=3, max_index_num=3)
    service.build_index("T", "a", None, 10, BASE_MS)
    service.build_index("T", "b", None, 20, BASE_MS + 1000)
    service.build_index("T", "c", None, 30, BASE_MS + 2000)   # needs a new file
    first, second = service.index_files
    assert (second.begin_phy_offset, second.begin_timestamp) == (30, BASE_MS + 2000)
    assert (first.end_phy_offset, first.end_timestamp) == (20, BASE_MS + 1000)
    service.close()


def test_skips_rollback_and_already_indexed(tmp_path):
    service = IndexService(str(tmp_path), max_hash_slot_num=3, max_index_num=50)
    assert service.build_index("T", "a", "U1", 500, BASE_MS) == 2
    assert service.build_index("T", "a", None, 400, BASE_MS) == 0      # below endPhyOffset
    rollback = int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
    assert service.build_index("T", "b", "U2", 600, BASE_MS, rollback) == 0
    commit = int(MessageSysFlag.TRANSACTION_COMMIT_TYPE)
    assert service.build_index("T", "c", None, 700, BASE_MS, commit) == 1
    assert service.query("T", "b", 10, 0, 2**62)[0] == []
    assert service.query("T", "a", 10, 0, 2**62)[0] == [500]
    assert service.query("Other", "a", 10, 0, 2**62)[0] == []
    service.close()


def test_delete_newer_than_and_expired(tmp_path):
    directory = str(tmp_path / "index")
    service = IndexService(directory, max_hash_slot_num=3, max_index_num=4)
    for position in range(9):                      # 3 entries per file -> 3 files
        service.build_index("T", f"k{position}", None, position * 10, BASE_MS + position * 1000)
    assert len(service.index_files) == 3
    service.close()
    service = IndexService(directory, max_hash_slot_num=3, max_index_num=4)
    assert service.load()
    assert service.delete_newer_than(BASE_MS + 5000) == 1   # the file ending at +8000
    assert len(os.listdir(directory)) == 2
    assert service.query("T", "k7", 10, 0, 2**62)[0] == []
    assert service.query("T", "k4", 10, 0, 2**62)[0] == [40]
    assert service.delete_expired(30) == 1                  # first file ends at phy 20
    assert service.delete_expired(10**9) == 0                # never the newest file
    assert service.query("T", "k1", 10, 0, 2**62)[0] == []
    service.close()


def test_load_refuses_wrong_size(tmp_path):
    (tmp_path / index_file_name(BASE_MS)).write_bytes(b"\0" * 100)
    assert not IndexService(str(tmp_path), 3, 4).load()


def test_bad_sizes_rejected(tmp_path):
    with pytest.raises(ValueError):
        IndexFile(str(tmp_path / "x"), 0, 10)
    with pytest.raises(ValueError):
        IndexFile(str(tmp_path / "x"), 5, 1)
    assert layout.index_file_size(3, 4) == 40 + 12 + 80
