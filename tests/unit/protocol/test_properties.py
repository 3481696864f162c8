"""pybroker.protocol.properties encodes and decodes message properties as Java does (protocol.md
§3.2, §3.6).

Method: hand-written strings for each of Java's tolerance rules, round trips of random maps
(hypothesis), the helpers on real property maps, and the batch-append separator rule.
"""
import pytest
from hypothesis import given, settings, strategies as st

from pybroker.protocol.properties import (append_batch_properties, decode_properties,
                                          encode_properties, keys_of, tags_of, uniq_key_of)


def test_encode_writes_separator_after_every_pair():
    assert encode_properties({"TAGS": "TagA", "KEYS": "k1 k2"}) == \
        "TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    assert encode_properties({}) == ""
    assert encode_properties({"A": None, "B": ""}) == "B\x01\x02"


@pytest.mark.parametrize("text,expected", [
    ("TAGS\x01TagA\x02KEYS\x01k1\x02", {"TAGS": "TagA", "KEYS": "k1"}),
    ("TAGS\x01TagA\x02KEYS\x01k1", {"TAGS": "TagA", "KEYS": "k1"}),   # no trailing separator
    ("", {}),
    ("a\x01", {}),                   # shorter than 3 characters
    ("\x01ab\x02", {}),              # name separator first
    ("ab\x01\x02", {}),              # name separator last: empty value is dropped, as in Java
    ("abc\x02", {}),                 # no name separator
    ("\x02\x02k\x01v\x02\x02", {"k": "v"}),
    ("k\x01v\x01w\x02", {"k": "v\x01w"}),    # the value keeps later separators
    ("k\x01one\x02k\x01two\x02", {"k": "two"}),
])
def test_decode_java_tolerance(text, expected):
    assert decode_properties(text) == expected


names = st.text(st.characters(blacklist_characters="\x01\x02"), min_size=1, max_size=12)
values = st.text(st.characters(blacklist_characters="\x02"), min_size=1, max_size=20)


@given(st.dictionaries(names, values, max_size=8))
@settings(max_examples=200, deadline=None)
def test_round_trip(properties):
    assert decode_properties(encode_properties(properties)) == properties


def test_helpers():
    properties = decode_properties("TAGS\x01TagA\x02KEYS\x01 k1  k2 \x02UNIQ_KEY\x01AC11\x02")
    assert tags_of(properties) == "TagA"
    assert keys_of(properties) == ["k1", "k2"]
    assert uniq_key_of(properties) == "AC11"
    assert (tags_of({}), keys_of({}), uniq_key_of({})) == (None, [], None)
    assert keys_of({"KEYS": ""}) == []


@pytest.mark.parametrize("inner,batch,expected", [
    ("a\x01b\x02", "CLUSTER\x01c\x02", "a\x01b\x02CLUSTER\x01c\x02"),
    ("a\x01b", "CLUSTER\x01c\x02", "a\x01b\x02CLUSTER\x01c\x02"),
    ("", "CLUSTER\x01c\x02", "CLUSTER\x01c\x02"),
    ("a\x01b", "", "a\x01b"),
])
def test_append_batch_properties(inner, batch, expected):
    assert append_batch_properties(inner, batch) == expected
    assert append_batch_properties(inner.encode(), batch.encode()) == expected.encode()
    assert decode_properties(expected) == {**decode_properties(inner), **decode_properties(batch)}
