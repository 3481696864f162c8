"""The topic-deletion handshake and the readers' forgetting of deleted files behave as documented.

Method: real control-block and store files in tmp_path. The supervisor side
(TopicDeletionRequests) runs in asyncio while a task plays the appender's step through the
control block; the dispatcher side (DispatcherDeletions) must not dispatch past the appender's
position and must destroy real consume-queue files there. A MappedFileQueue reader keeps a
view of a file another process unlinked, forgets it, and the map closes only on release.
"""
import asyncio
import os

from pybroker.proc.topic_deletion import (DispatcherDeletions, TopicDeletionRequests,
                                          read_requested_topics)
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.control_block import ControlBlock
from pybroker.store.mapped_file import MappedFileQueue


class _Wake:
    def __init__(self):
        self.signals = 0

    def signal(self):
        self.signals += 1


class _Dispatcher:
    def __init__(self):
        self.forgotten = 0

    def forget_queues(self):
        self.forgotten += 1

    def release_files(self):
        pass


def test_read_requested_topics_takes_only_the_sequence_range(tmp_path):
    path = tmp_path / "requests"
    path.write_text("1\tA\n2\tB\n2\tC\nbad line\n3\tD\n")
    assert read_requested_topics(str(path), 1, 2) == ["B", "C"]
    assert read_requested_topics(str(path), 0, 3) == ["A", "B", "C", "D"]
    assert read_requested_topics(str(tmp_path / "missing"), 0, 9) == []


def test_handshake_deletes_queues_at_the_appender_position(tmp_path):
    control = ControlBlock(str(tmp_path / "control"), create=True)
    queues = ConsumeQueueStore(str(tmp_path), 20 * 10)
    for queue_id in range(2):
        queues.find_or_create("Gone", queue_id).put(100 * queue_id, 50, 0, 0)
    queues.find_or_create("Kept", 0).put(300, 50, 0, 0)
    requests_file = str(tmp_path / "requests")
    wake = _Wake()
    requests = TopicDeletionRequests(requests_file, control, wake)
    dispatcher_side = DispatcherDeletions(requests_file, control)
    dispatcher = _Dispatcher()

    async def appender_then_dispatcher():
        while control.topic_deletion_requested == 0:
            await asyncio.sleep(0.001)
        control.topic_deletion_offset = 5000            # the appender's end W
        control.publish("topic_deletion_appended", control.topic_deletion_requested)
        # Written beyond W: the dispatcher must stop at W first.
        assert dispatcher_side.target(9000) == 5000
        assert dispatcher_side.apply_if_reached(4000, queues, dispatcher) == 0
        assert os.path.isdir(os.path.join(tmp_path, "consumequeue", "Gone"))
        assert dispatcher_side.apply_if_reached(5000, queues, dispatcher) == 1
        assert dispatcher_side.target(9000) == 9000

    async def main():
        helper = asyncio.create_task(appender_then_dispatcher())
        deleted = await requests.delete_topics(["Gone"], timeout_s=5)
        await helper
        return deleted

    try:
        assert asyncio.run(main()) is True
        assert wake.signals == 1 and dispatcher.forgotten == 1
        assert control.topic_deletion_done == 1
        assert not os.path.exists(os.path.join(tmp_path, "consumequeue", "Gone"))
        assert queues.find("Kept", 0) is not None and queues.find("Gone", 0) is None
    finally:
        queues.close()
        control.close()


def test_delete_times_out_without_a_data_plane(tmp_path):
    control = ControlBlock(str(tmp_path / "control"), create=True)
    try:
        requests = TopicDeletionRequests(str(tmp_path / "requests"), control, _Wake())
        assert asyncio.run(requests.delete_topics(["Nobody"], timeout_s=0.05)) is False
        assert control.topic_deletion_requested == 1
    finally:
        control.close()


def test_forget_files_below_keeps_a_held_map_until_release(tmp_path):
    file_size = 4096
    writer = MappedFileQueue(str(tmp_path), file_size)
    for index in range(3):
        writer.last_mapped_file().append(bytes([index + 1]) * file_size)
    reader = MappedFileQueue(str(tmp_path), file_size, read_only=True)
    assert reader.load()
    first = reader.mapped_files[0]
    view = first.view(0, 16)
    assert view is not None
    assert writer.delete_expired_by_time(0, 0, 0, True) == 2     # unlinks files 0 and 1
    assert reader.forget_files_below(2 * file_size) == 2
    assert reader.min_offset() == 2 * file_size
    assert bytes(view) == b"\x01" * 16 and not first.cleanup_over
    view.release()
    first.release()
    assert first.cleanup_over
    writer.shutdown(0)
    reader.shutdown(0)
