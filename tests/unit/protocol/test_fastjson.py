"""Goal: fastjson.loads reads what Java's fastjson writes and rejects what is not JSON.

Method: table-driven documents (bare integer and identifier keys, object keys, key-looking text
inside strings), a property test comparing against orjson on standard JSON rewritten with bare
keys, and garbage / over-limit inputs that must raise ValueError.
"""
import random
import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.protocol import fastjson


@pytest.mark.parametrize("text, expected", [
    ('{"offsetTable":{"T@G":{0:120,1:118}}}', {"offsetTable": {"T@G": {"0": 120, "1": 118}}}),
    ('{"offsetTable":{1:0,2:5,3:17}}', {"offsetTable": {"1": 0, "2": 5, "3": 17}}),
    ('{\n\t"a":{\n\t\t-1:2\n\t}\n}', {"a": {"-1": 2}}),
    ('{brokerAddrs:{0:"127.0.0.1:10911"}}', {"brokerAddrs": {"0": "127.0.0.1:10911"}}),
    ('{"s":"{0:1, x:2}","t":"\\"{3:4}"}', {"s": "{0:1, x:2}", "t": '"{3:4}'}),
    ('[{0:1},{"k":[1,2,{3:[4]}]}]', [{"0": 1}, {"k": [1, 2, {"3": [4]}]}]),
    ('{{"topic":"T","queueId":0}:5}', {'{"queueId":0,"topic":"T"}': 5}),
    ('{"v":-5,"w":1.5e3,"x":true,"y":null,0:false}',
     {"v": -5, "w": 1500.0, "x": True, "y": None, "0": False}),
])
def test_fastjson_documents(text, expected):
    assert fastjson.loads(text) == expected
    assert fastjson.loads(text.encode()) == expected
    assert fastjson.loads(memoryview(bytearray(text.encode()))) == expected


def test_object_key_round_trips_through_orjson():
    parsed = fastjson.loads('{{"brokerName":"b","queueId":3,"topic":"T"}:42}')
    (key, value), = parsed.items()
    assert orjson.loads(key) == {"brokerName": "b", "queueId": 3, "topic": "T"}
    assert value == 42


@pytest.mark.parametrize("text", [
    "", "garbage", "{", "}", "[1,2}", '{"a":1', '{"a', "{0:}", "{[1]:2}", "{a b:1}",
    '{"a":1}}', "{1.5:2}", "{0:1,,}", '{"x":"\\', b"{0:\xff}",
])
def test_garbage_raises_value_error(text):
    with pytest.raises(ValueError):
        fastjson.loads(text)


def test_limits():
    deep = "{0:" * 300 + "1" + "}" * 300
    with pytest.raises(ValueError, match="nesting"):
        fastjson.loads(deep)
    assert fastjson.loads("{0:" * 20 + "1" + "}" * 20, depth_max=20) is not None
    with pytest.raises(ValueError, match="exceeds"):
        fastjson.loads(b'{"a":"' + b"x" * 100 + b'"}', size_max_bytes=50)


def _bare(value, rand):
    """Render value as fastjson would: integer-like keys unquoted, at random."""
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            quoted = orjson.dumps(key).decode()
            # fastjson leaves only ASCII integer keys bare (str.isdigit also accepts "²").
            is_integer = re.fullmatch(r"-?[0-9]+", key) is not None
            shown = key if is_integer and rand.random() < 0.7 else quoted
            items.append(f"{shown}:{_bare(item, rand)}")
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_bare(item, rand) for item in value) + "]"
    return orjson.dumps(value).decode()


_keys = st.one_of(st.integers(-10**6, 10**12).map(str), st.text(max_size=8))
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(value=_json, seed=st.integers(0, 2**32))
def test_matches_orjson_after_unquoting_keys(value, seed):
    text = _bare(value, random.Random(seed))
    assert fastjson.loads(text) == value
