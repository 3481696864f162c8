"""MappedFile and MappedFileQueue keep RocketMQ's file rules and never unmap under a reader.

Method: real files in tmp_path; append, roll, flush, reload, truncate and delete, checking the
bytes on disk with plain file reads and the hold counting with live memoryviews.
"""
import os
import time

import pytest

from pybroker.store import layout
from pybroker.store.mapped_file import (ALLOCATIONS, MappedFile, MappedFileQueue,
                                        offset_file_name)

FILE_SIZE = 64 * 1024


def read_file(path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize("allocation", ALLOCATIONS)
def test_new_file_has_full_size_and_appends_land_on_disk(tmp_path, allocation):
    path = str(tmp_path / offset_file_name(FILE_SIZE * 3))
    mapped_file = MappedFile(path, FILE_SIZE, allocation=allocation)
    assert os.path.getsize(path) == FILE_SIZE
    assert mapped_file.file_from_offset == FILE_SIZE * 3
    assert mapped_file.file_name == "%020d" % (FILE_SIZE * 3)
    assert mapped_file.append(b"hello") and mapped_file.append(bytearray(b" world"))
    assert mapped_file.wrote_position == 11
    assert mapped_file.flush() == 11
    assert read_file(path)[:11] == b"hello world"
    assert not os.path.exists(path + ".tmp")
    mapped_file.close()


def test_append_without_room_writes_nothing(tmp_path):
    mapped_file = MappedFile(str(tmp_path / offset_file_name(0)), 4096)
    assert mapped_file.append(b"a" * 4000)
    assert not mapped_file.append(b"b" * 97)
    assert mapped_file.wrote_position == 4000 and mapped_file.remaining() == 96
    assert mapped_file.append(b"c" * 96) and mapped_file.is_full()
    mapped_file.close()
    assert read_file(str(tmp_path / offset_file_name(0)))[4000:] == b"c" * 96


def test_write_at_bounds_and_flush_covers_random_writes(tmp_path):
    path = str(tmp_path / "index_like")
    mapped_file = MappedFile(path, 3 * 4096)
    assert mapped_file.file_from_offset == 0
    with pytest.raises(ValueError):
        mapped_file.write_at(3 * 4096 - 2, b"abc")
    mapped_file.write_at(2 * 4096 + 5, b"xyz")
    mapped_file.flush()
    assert read_file(path)[2 * 4096 + 5:2 * 4096 + 8] == b"xyz"
    mapped_file.close()


def test_view_range_checks_against_wrote_position(tmp_path):
    mapped_file = MappedFile(str(tmp_path / offset_file_name(0)), 4096)
    mapped_file.append(b"0123456789")
    assert mapped_file.view(5, 6) is None
    assert mapped_file.view(-1, 2) is None
    view = mapped_file.view(2, 3)
    assert bytes(view) == b"234" and mapped_file.hold_count == 2
    view.release()
    mapped_file.release()
    assert mapped_file.hold_count == 1
    mapped_file.close()


def test_flush_least_pages_waits_for_enough_dirty_pages(tmp_path):
    mapped_file = MappedFile(str(tmp_path / offset_file_name(0)), 16 * 4096)
    mapped_file.append(b"x" * 4096)
    assert mapped_file.flush(least_pages=2) == 0
    mapped_file.append(b"y" * 4096)
    assert mapped_file.flush(least_pages=2) == 2 * 4096
    mapped_file.close()


def test_destroy_waits_for_holds_then_forces_without_unmapping_live_views(tmp_path):
    path = str(tmp_path / offset_file_name(0))
    mapped_file = MappedFile(path, 4096)
    mapped_file.append(b"payload")
    view = mapped_file.view(0, 7)
    assert not mapped_file.destroy(interval_forcibly_ms=60_000)
    assert os.path.exists(path) and not mapped_file.hold()
    assert bytes(view) == b"payload"
    # Forced after the interval: the file goes, the live view still reads the old bytes.
    assert mapped_file.destroy(interval_forcibly_ms=0)
    assert not os.path.exists(path)
    assert bytes(view) == b"payload"
    view.release()


def test_destroy_after_release_deletes(tmp_path):
    path = str(tmp_path / offset_file_name(0))
    mapped_file = MappedFile(path, 4096)
    mapped_file.append(b"abc")
    view = mapped_file.view(0, 3)
    assert not mapped_file.destroy(60_000)
    view.release()
    mapped_file.release()
    assert mapped_file.cleanup_over and not os.path.exists(path)
    assert mapped_file.destroy(60_000)


def fill_queue(queue: MappedFileQueue, total_bytes: int, chunk: int = 1000) -> bytes:
    written = bytearray()
    while len(written) < total_bytes:
        data = bytes([len(written) // chunk % 251]) * chunk
        mapped_file = queue.last_mapped_file()
        if not mapped_file.append(data):
            mapped_file.wrote_position = mapped_file.file_size   # roll like a BLANK would
            written += bytes(mapped_file.file_size - len(written) % mapped_file.file_size)
            continue
        written += data
    return bytes(written)


def test_queue_rolls_names_and_reloads(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 4096)
    assert queue.min_offset() == -1 and queue.max_offset() == 0
    expected = fill_queue(queue, 3 * 4096 + 500)
    names = sorted(os.listdir(tmp_path))
    assert names == [offset_file_name(i * 4096) for i in range(4)]
    assert all(len(name) == layout.OFFSET_FILE_NAME_DIGITS for name in names)
    assert queue.max_offset() == len(expected)
    queue.flush()
    assert queue.flushed_where == len(expected)
    on_disk = b"".join(read_file(str(tmp_path / n)) for n in names)
    assert on_disk[:len(expected)] == expected
    queue.shutdown(1000)

    reloaded = MappedFileQueue(str(tmp_path), 4096, read_only=True)
    assert reloaded.load()
    assert reloaded.min_offset() == 0 and len(reloaded.mapped_files) == 4
    assert reloaded.find_mapped_file_by_offset(2 * 4096 + 7).file_from_offset == 2 * 4096
    assert reloaded.find_mapped_file_by_offset(10 * 4096) is None
    assert reloaded.find_mapped_file_by_offset(10 * 4096, True).file_from_offset == 0
    reloaded.shutdown(1000)


def test_first_file_created_at_rounded_start_offset(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 4096)
    mapped_file = queue.last_mapped_file(start_offset=3 * 4096 + 100)
    assert mapped_file.file_from_offset == 3 * 4096
    assert queue.last_mapped_file(need_create=False) is mapped_file
    queue.shutdown(0)


def test_load_refuses_wrong_size(tmp_path):
    (tmp_path / offset_file_name(0)).write_bytes(b"\0" * 100)
    assert not MappedFileQueue(str(tmp_path), 4096).load()


def test_truncate_dirty_files_zeroes_tail_and_deletes_later_files(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 4096)
    fill_queue(queue, 3 * 4096)
    queue.flush()
    queue.shutdown(0)
    queue = MappedFileQueue(str(tmp_path), 4096)
    assert queue.load()
    queue.truncate_dirty_files(4096 + 1500)
    assert sorted(os.listdir(tmp_path)) == [offset_file_name(0), offset_file_name(4096)]
    second = read_file(str(tmp_path / offset_file_name(4096)))
    assert second[1500:] == bytes(4096 - 1500) and any(second[:1500])
    assert queue.max_offset() == 4096 + 1500
    queue.set_wrote_and_flushed(4096 + 1000)
    assert queue.max_offset() == 4096 + 1000 and queue.flushed_where == 4096 + 1000
    queue.shutdown(0)


def test_delete_expired_by_time_skips_held_file_until_released(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 4096)
    fill_queue(queue, 3 * 4096 + 10)
    old_ms = time.time() - 3600
    for mapped_file in queue.mapped_files[:-1]:
        os.utime(mapped_file.path, (old_ms, old_ms))
    held = queue.mapped_files[1]
    view = held.view(0, 16)
    deleted = queue.delete_expired_by_time(60_000, 0, 60_000, False)
    # The first file goes; the held second file stops the pass and stays on disk.
    assert deleted == 1 and os.path.exists(held.path)
    assert queue.min_offset() == 4096
    view.release()
    held.release()
    assert queue.delete_expired_by_time(60_000, 0, 60_000, False) == 2
    assert not os.path.exists(held.path)
    assert queue.min_offset() == 3 * 4096    # the last file is never deleted by time
    queue.shutdown(0)


def test_delete_expired_by_offset_reads_last_unit(tmp_path):
    unit_size = layout.CQ_STORE_UNIT_SIZE
    queue = MappedFileQueue(str(tmp_path), unit_size * 4)
    for index in range(10):
        mapped_file = queue.last_mapped_file()
        unit = (index * 100).to_bytes(8, "big") + (50).to_bytes(4, "big") + bytes(8)
        assert mapped_file.append(unit)
    # Files hold units 0-3, 4-7, 8-9; last units point at 300 and 700.
    assert queue.delete_expired_by_offset(500, unit_size) == 1
    assert queue.min_offset() == unit_size * 4
    assert queue.delete_expired_by_offset(10_000, unit_size) == 1
    assert len(queue.mapped_files) == 1
    queue.destroy()
    assert not os.path.exists(tmp_path / offset_file_name(0))


def test_warm_prefaults_without_changing_data(tmp_path):
    mapped_file = MappedFile(str(tmp_path / offset_file_name(0)), 8 * 4096, allocation="sparse")
    mapped_file.append(b"keep")
    mapped_file.warm()
    assert mapped_file.wrote_position == 4
    mapped_file.flush()
    mapped_file.close()
    data = read_file(str(tmp_path / offset_file_name(0)))
    assert data[:4] == b"keep" and not any(data[4:])
