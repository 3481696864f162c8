"""A pull without a record filter, decided in one C pass over the units, answers as the unit loop.

Method: a real store in tmp_path (16 KiB CommitLog files, so a pull crosses files; small
transfer caps, so batches fill by bytes and by count) takes records of random sizes with three
tags; a MessageStoreReader then answers thousands of seeded pulls (offset, count, byte cap, tag
set) twice: as a consumer's pull goes (no record filter: ``pybroker._fast.pull_scan`` decides
the units, ``StoreReads._take_at_once`` reads them) and with a record filter that takes
everything, which forces the per-unit loop that Java's getMessage follows (the twin SQL92
pulls keep). Status, next offset, counts and every byte of every record must be the same; so
must the file holds, which both give back on release. Variants: the older half of the store
counted as in disk (its own, smaller caps), and a CommitLog range recovery skipped as damaged.
"""
import dataclasses
import random

import pytest

from pybroker._fast import pull_scan
from pybroker._fast.jhash import tags_code
from pybroker.store import layout
from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.message_store import MessageStore
from pybroker.store.read_only_store import MessageStoreReader
from pybroker.store.status import GetStatus

from tests.unit.store.test_read_only_store import TOPIC, body_of, encode, settings_for

TAGS = ("tA", "tB", "tC")


@pytest.fixture
def filled(tmp_path):
    rand = random.Random(20261204)
    settings = dataclasses.replace(settings_for(tmp_path),
                                   max_transfer_bytes_on_message_in_memory=1500,
                                   max_transfer_count_on_message_in_memory=9,
                                   max_transfer_bytes_on_message_in_disk=700,
                                   max_transfer_count_on_message_in_disk=4)
    with MessageStore(settings) as store:
        for index in range(1500):
            body = body_of(index, rand.choice((0, 3, 20, 60, 150)))
            result = store.put_messages(encode(body, TAGS=TAGS[rand.randrange(3)]), TOPIC, 0,
                                        1, 0)
            assert result.status.name == "PUT_OK"
        end = store.commitlog.max_offset()
    with MessageStoreReader(settings, dispatched_position=end) as reader:
        reader.advance(end, end)
        yield reader


def answer(reader, offset, count, max_bytes, codes, record_filter=None):
    result = reader.get_messages("g", TOPIC, 0, offset, count, max_bytes, codes, record_filter)
    with result:
        holds = [mapped_file.hold_count for mapped_file in result._mapped_files]
        return (result.status, result.next_begin_offset, result.message_count,
                [bytes(buffer) for buffer in result.buffers], len(holds) > 0)


@pytest.mark.parametrize("variant", ["in_memory", "half_in_disk", "damaged_range"])
def test_the_array_path_answers_as_the_unit_loop(filled, rand, variant):
    files = filled.commitlog.mapped_file_queue.mapped_files
    assert len(files) >= 10                                   # pulls do cross files
    end = filled.commitlog.max_offset()
    if variant == "half_in_disk":
        filled._memory_bytes = end // 2
    elif variant == "damaged_range":
        base = files[3].file_from_offset
        filled.damaged_records = DamagedRecords(filled.store_root, [(base + 100, base + 3000)])
    holds_before = [mapped_file.hold_count for mapped_file in files]
    found = 0
    for _ in range(3000):
        offset = rand.randrange(-5, 1510)
        count = rand.choice((1, 2, 5, 32))
        max_bytes = rand.choice((None, None, 200, 900))
        codes = rand.choice((None, None, frozenset({tags_code("tA")}),
                             frozenset({tags_code("tB"), tags_code("tC")}),
                             frozenset({tags_code("none")})))
        fast = answer(filled, offset, count, max_bytes, codes)
        loop = answer(filled, offset, count, max_bytes, codes, record_filter=lambda view: True)
        assert fast == loop, (offset, count, max_bytes, codes)
        found += fast[0] is GetStatus.FOUND
    assert found > 1000
    assert [mapped_file.hold_count for mapped_file in files] == holds_before


def test_the_scan_layout_matches_the_store_layout_table():
    assert pull_scan.LAYOUT == {
        "cq_unit_size": layout.CQ_STORE_UNIT_SIZE,
        "cq_unit_size_position": layout.CQ_UNIT_SIZE_POSITION,
        "cq_unit_tags_code_position": layout.CQ_UNIT_TAGS_CODE_POSITION,
        "cq_filler_size": layout.CQ_FILLER_SIZE}
