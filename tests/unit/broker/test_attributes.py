"""Topic and group attributes follow Java 5.3.3's rules and messages to the letter.

Method: a table of modification strings, each with the answer the Java 5.3.3 broker gave for
it over UPDATE_AND_CREATE_TOPIC (recorded from a live broker; tests/compat/test_5x_basics.py
sends the same table to a running Java broker and compares again), run through
parse_modification + apply_modification; and Java's hash-ordered collections, whose order
decides which key an error names and how a value set is printed.
"""
import pytest

from pybroker.broker.attributes import (GROUP_ATTRIBUTES, TOPIC_ATTRIBUTES, AttributeRefused,
                                        apply_modification, parse_modification)
from pybroker.filter.java_lang import guava_set_order, hash_order, put_order

TYPES = "[UNSPECIFIED, TRANSACTION, FIFO, MIXED, DELAY, NORMAL]"
FIFO = {"message.type": "FIFO"}

# (current attributes or None for a new topic, modification, Java's result or error remark)
JAVA_ANSWERS = [
    (None, "+message.type=FIFO", FIFO),
    (FIFO, "+message.type=NORMAL", {"message.type": "NORMAL"}),
    (FIFO, "-message.type", {}),
    ({}, "-message.type", "attempt to delete a nonexistent key: message.type"),
    (None, "-message.type", "only add attribute is supported while creating topic. key: "
                            "message.type"),
    (None, "+message.type=FOO", f"value is not in set: {TYPES}"),
    (None, "+message.type=fifo", f"value is not in set: {TYPES}"),
    (None, "+foo=bar", "unsupported key: foo"),
    (None, "+queue.type=BatchCQ", {"queue.type": "BatchCQ"}),
    ({"queue.type": "BatchCQ"}, "+queue.type=SimpleCQ",
     "attempt to update an unchangeable attribute. key: queue.type"),
    (None, "+queue.type=Foo", "value is not in set: [SimpleCQ, BatchCQ]"),
    (None, "+cleanup.policy=Foo", "value is not in set: [DELETE, COMPACTION]"),
    (None, "+cleanup.policy=COMPACTION", {"cleanup.policy": "COMPACTION"}),
    ({"reserve.time": "100"}, "+cleanup.policy=COMPACTION",
     "attempt to update an unchangeable attribute. key: cleanup.policy"),
    (FIFO, "+message.type=DELAY,+queue.type=BatchCQ",
     "attempt to update an unchangeable attribute. key: queue.type"),
    (None, "message.type=FIFO", "add/alter attribute format is wrong: message.type"),
    (None, "+message.type", "delete attribute format is wrong: +message.type"),
    (None, "+message.type=FIFO,+message.type=DELAY", "key duplication: +message.type"),
    (None, "+a=b=c", "unsupported key: a"),
    (None, "+reserve.time=100", {"reserve.time": "100"}),
    (None, "+reserve.time=+5", {"reserve.time": "+5"}),
    (None, "+reserve.time=-5", "value is not in range(-1, 9223372036854775807)"),
    (None, "+reserve.time=x", 'For input string: "x"'),
    (None, "+reserve.time=99999999999999999999", 'For input string: "99999999999999999999"'),
    (None, "", {}),
    (None, ",", {}),
    (FIFO, "", FIFO),
    ({}, "+message.type=FIFO,-x", "attempt to delete a nonexistent key: x"),
    (None, "+a=", "Index 1 out of bounds for length 1"),
    (None, "+reserve.time=", "Index 1 out of bounds for length 1"),
    (None, "=", "Index 0 out of bounds for length 0"),
    (None, "=x", "add/alter attribute format is wrong: "),
    (None, ",+a=b", "delete attribute format is wrong: "),
    (None, "-", "kv string format wrong."),
    (None, "+", "delete attribute format is wrong: +"),
    (None, "+=1", "kv string format wrong."),
    (None, "+a=1,-a", "only add attribute is supported while creating topic. key: a"),
    (None, "+foo=1,+bar=2,+baz=3", "unsupported key: bar"),
    (None, "+message.type=FIFO, +queue.type=SimpleCQ", "kv string format wrong."),
]


def modified(current, text):
    """What UPDATE_AND_CREATE_TOPIC stores for ``text``, or its refusal's remark."""
    try:
        return apply_modification(TOPIC_ATTRIBUTES, current is None, current or {},
                                  parse_modification(text))
    except AttributeRefused as refused:
        return refused.remark


@pytest.mark.parametrize("current, text, answer", JAVA_ANSWERS)
def test_java_5_3_3_answers(current, text, answer):
    before = dict(current or {})
    assert modified(current, text) == answer
    assert (current or {}) == before   # refused or not, the current map is never changed


def test_group_attributes_refuse_every_key_as_java_does():
    # The body's attribute map is the modification; Java 5.3.3 knows no group attribute.
    for modification, remark in (({"+foo": "1"}, "unsupported key: foo"),
                                 ({"foo": "1"}, "only add attribute is supported while "
                                                "creating topic. key: oo")):
        with pytest.raises(AttributeRefused) as refused:
            apply_modification(GROUP_ATTRIBUTES, True, {}, modification)
        assert refused.value.remark == remark
    with pytest.raises(AttributeRefused) as refused:     # the group exists already
        apply_modification(GROUP_ATTRIBUTES, False, {}, {"foo": "1"})
    assert refused.value.remark == "wrong format key: oo"
    assert apply_modification(GROUP_ATTRIBUTES, False, {}, {}) == {}


def test_java_hash_orders():
    # Guava 32 sizes newHashSet(6 values) at 8 buckets, (2 values) at 4; Java printed these.
    assert guava_set_order(["UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION",
                            "MIXED"]) == TYPES[1:-1].split(", ")
    assert guava_set_order(["BatchCQ", "SimpleCQ"]) == ["SimpleCQ", "BatchCQ"]
    # new HashMap<>() keeps 16 buckets up to 12 entries, then doubles.
    keys = [f"k{number}" for number in range(13)]
    assert put_order(keys[:12]) == hash_order(keys[:12], 16)
    assert put_order(keys) == hash_order(keys, 32)
    assert sorted(put_order(keys)) == sorted(keys)
