"""Goal: config documents load Java-written files, round-trip, and survive a crash mid-save.

Method: load hand-written fastjson-style golden files (tests/golden/config), save/load round
trips in real temp directories, and reproduce every intermediate state of the safe-write
sequence (.tmp/.bak left around, main file missing or corrupt) to check what load returns.
"""
import os
import pathlib
import shutil

import orjson
import pytest

from pybroker.errors import StoreCorruptError
from pybroker.store import config_docs as cd

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "golden" / "config"


def test_golden_topics_4x():
    document = cd.load_topics(str(GOLDEN / "topics.json"))
    assert document.data_version.counter == 12
    assert document.data_version.timestamp == 1700000000000
    topic = document.topic_config_table["TopicTest"]
    assert (topic.read_queue_nums, topic.write_queue_nums, topic.perm) == (4, 4, 6)
    assert topic.topic_filter_type == "SINGLE_TAG" and topic.order is False
    assert document.topic_config_table["%RETRY%GroupA"].read_queue_nums == 1


def test_golden_topics_5x_keeps_attributes_and_state_version(tmp_path):
    document = cd.load_topics(str(GOLDEN / "topics-5x.json"))
    topic = document.topic_config_table["OrderTopic"]
    assert topic.attributes == {"message.type": "FIFO"} and topic.order is True
    assert document.data_version.state_version == 0
    path = str(tmp_path / "topics.json")
    cd.save_topics(path, document)
    written = orjson.loads(pathlib.Path(path).read_bytes())
    assert written["dataVersion"]["stateVersion"] == 0
    assert written["topicConfigTable"]["OrderTopic"]["attributes"] == {"message.type": "FIFO"}


def test_golden_consumer_offsets_unquoted_keys(tmp_path):
    document = cd.load_consumer_offsets(str(GOLDEN / "consumerOffset.json"))
    assert document.offset_table["TopicTest@GroupA"] == {0: 120, 1: 118, 2: 0, 3: 7}
    assert document.offset_table["%RETRY%GroupA@GroupA"] == {0: 3}
    path = str(tmp_path / "consumerOffset.json")
    cd.save_consumer_offsets(path, document)
    # What we write is standard JSON: orjson (strict) reads it, keys quoted.
    strict = orjson.loads(pathlib.Path(path).read_bytes())
    assert strict["offsetTable"]["TopicTest@GroupA"]["1"] == 118
    assert cd.load_consumer_offsets(path) == document


def test_golden_delay_offsets():
    document = cd.load_delay_offsets(str(GOLDEN / "delayOffset.json"))
    assert document.offset_table == {1: 0, 2: 5, 3: 17}
    assert document.data_version is None


def test_golden_subscription_groups():
    document = cd.load_subscription_groups(str(GOLDEN / "subscriptionGroup.json"))
    slow = document.subscription_group_table["GroupSlow"]
    assert (slow.consume_enable, slow.retry_max_times, slow.retry_queue_nums) == (False, 3, 2)
    group = document.subscription_group_table["GroupA"]
    assert group == cd.SubscriptionGroupConfig("GroupA")   # every field at Java's default
    assert group.consume_timeout_minute == 15 and group.which_broker_when_consume_slowly == 1


def test_defaults():
    topic = cd.TopicConfig("T")
    assert (topic.read_queue_nums, topic.write_queue_nums, topic.perm, topic.topic_sys_flag) \
        == (16, 16, 6, 0)
    assert topic.topic_filter_type == "SINGLE_TAG" and topic.order is False
    group = cd.SubscriptionGroupConfig("G")
    assert group.retry_queue_nums == 1 and group.retry_max_times == 16 and group.broker_id == 0
    assert group.consume_enable and group.consume_from_min_enable
    assert group.consume_broadcast_enable and group.notify_consumer_ids_changed_enable


def test_round_trip_all_documents_and_unknown_fields(tmp_path):
    topics = cd.TopicConfigDocument(extra={"futureField": [1]})
    topics.topic_config_table["A"] = cd.TopicConfig("A", 4, 2, extra={"newKnob": "x"})
    before = topics.data_version.counter
    topics.data_version.next_version()
    assert topics.data_version.counter == before + 1
    groups = cd.SubscriptionGroupDocument()
    groups.subscription_group_table["G"] = cd.SubscriptionGroupConfig(
        "G", retry_max_times=5, extra={"subscriptionDataSet": [{"topic": "T"}]})
    delay = cd.DelayOffsetDocument({1: 10, 18: 2}, cd.DataVersion(5, 7, 0))
    offsets = cd.ConsumerOffsetDocument({"T@G": {0: 1, 15: 2**40}})
    pairs = [(topics, cd.save_topics, cd.load_topics),
             (groups, cd.save_subscription_groups, cd.load_subscription_groups),
             (delay, cd.save_delay_offsets, cd.load_delay_offsets),
             (offsets, cd.save_consumer_offsets, cd.load_consumer_offsets)]
    for index, (document, save, load) in enumerate(pairs):
        path = str(tmp_path / f"doc{index}.json")
        save(path, document)
        assert load(path) == document
        assert not os.path.exists(path + ".tmp")


def test_absent_everything_is_empty(tmp_path):
    assert cd.load_consumer_offsets(str(tmp_path / "consumerOffset.json")).offset_table == {}
    assert cd.load_topics(str(tmp_path / "topics.json")).topic_config_table == {}


def _two_versions(path: str):
    cd.save_delay_offsets(path, cd.DelayOffsetDocument({1: 1}))
    cd.save_delay_offsets(path, cd.DelayOffsetDocument({1: 2}))
    return pathlib.Path(path)


def test_save_keeps_previous_content_in_bak(tmp_path):
    main = _two_versions(str(tmp_path / "delayOffset.json"))
    assert cd.load_delay_offsets(str(main) + ".bak").offset_table == {1: 1}
    assert cd.load_delay_offsets(str(main)).offset_table == {1: 2}


@pytest.mark.parametrize("damage", ["garbage", "empty", "truncated"])
def test_corrupt_main_falls_back_to_bak(tmp_path, damage):
    main = _two_versions(str(tmp_path / "delayOffset.json"))
    content = {"garbage": b"\x00\x01not json", "empty": b"",
               "truncated": main.read_bytes()[:10]}[damage]
    main.write_bytes(content)
    assert cd.load_delay_offsets(str(main)).offset_table == {1: 1}


def test_corrupt_main_without_bak_raises_naming_the_file(tmp_path):
    main = tmp_path / "topics.json"
    main.write_bytes(b'{"topicConfigTable":')
    with pytest.raises(StoreCorruptError, match="topics.json"):
        cd.load_topics(str(main))
    # A corrupt .bak as well is no better.
    (tmp_path / "topics.json.bak").write_bytes(b"[")
    with pytest.raises(StoreCorruptError, match=r"topics\.json\.bak"):
        cd.load_topics(str(main))


def test_wrong_shape_counts_as_corrupt(tmp_path):
    main = tmp_path / "consumerOffset.json"
    main.write_bytes(b'{"offsetTable":{"T@G":[1,2]}}')
    with pytest.raises(StoreCorruptError):
        cd.load_consumer_offsets(str(main))


def test_crash_states_of_the_safe_write(tmp_path):
    """Each intermediate state of save (tmp written / bak written / main gone) loads."""
    path = str(tmp_path / "delayOffset.json")
    main = _two_versions(path)                       # main = {1:2}, bak = {1:1}
    new = orjson.dumps({"offsetTable": {1: 3}}, option=orjson.OPT_NON_STR_KEYS)
    # 1. died after writing tmp: main still the old content.
    pathlib.Path(path + ".tmp").write_bytes(new)
    assert cd.load_delay_offsets(path).offset_table == {1: 2}
    # 2. died after copying main to bak: still the old content.
    shutil.copyfile(path, path + ".bak")
    assert cd.load_delay_offsets(path).offset_table == {1: 2}
    # 3. died after deleting main (Java's sequence): the complete tmp is the newest content.
    main.unlink()
    assert cd.load_delay_offsets(path).offset_table == {1: 3}
    # 3'. same, but the tmp is torn: the bak is used.
    pathlib.Path(path + ".tmp").write_bytes(new[:5])
    assert cd.load_delay_offsets(path).offset_table == {1: 2}
    # Saving again from this state completes normally and clears the tmp.
    cd.save_delay_offsets(path, cd.DelayOffsetDocument({1: 4}))
    assert cd.load_delay_offsets(path).offset_table == {1: 4}
    assert not os.path.exists(path + ".tmp")
