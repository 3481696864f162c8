"""pybroker._fast.jhash reproduces Java's String.hashCode over UTF-16 code units.

Method: hand-checked golden values (known Java results and ones derived by reasoning about UTF-16
units), then a plain-Python oracle (h = 31*h + unit over the UTF-16-LE encoding) on random
strings including supplementary characters; the UTF-8 variant against decode("replace").
"""
import pytest
from hypothesis import given, settings, strategies as st

from pybroker._fast.jhash import index_key_hash, java_hash, java_hash_utf8, tags_code


def oracle_java_hash(text: str) -> int:
    units = text.encode("utf-16-le", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "little")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


GOLDEN = [
    ("hello", 99162322),
    ("", 0),
    ("TagA", 2598919),
    ("a", 97),
    ("polygenelubricants", -2147483648),    # the well-known Integer.MIN_VALUE string
    # "é" is one unit 0xE9: 31*104 + 233 = 3457.
    ("hé", 3457),
    # U+1F600 is two units D83D DE00: 31*0xD83D + 0xDE00 = 1772899.
    ("\U0001F600", 1772899),
    # "中" is one unit 0x4E2D = 20013; "a中" = 31*97 + 20013.
    ("a中", 31 * 97 + 20013),
]


@pytest.mark.parametrize("text,expected", GOLDEN)
def test_golden(text, expected):
    assert java_hash(text) == expected
    assert oracle_java_hash(text) == expected
    assert java_hash_utf8(text.encode()) == expected


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_against_oracle(text):
    assert java_hash(text) == oracle_java_hash(text)
    assert java_hash_utf8(text.encode("utf-8")) == oracle_java_hash(text)


def test_lone_surrogate_is_one_unit():
    # Python can hold a lone surrogate; Java would hash it as the single unit it is.
    assert java_hash("\ud800x") == 31 * 0xD800 + ord("x")


@given(st.binary(max_size=40))
@settings(max_examples=300, deadline=None)
def test_utf8_of_malformed_bytes_matches_replacing_decoder(data):
    assert java_hash_utf8(data) == oracle_java_hash(data.decode("utf-8", "replace"))


def test_utf8_range_and_bad_range():
    data = b"xxTopicTest#key-1yy"
    assert java_hash_utf8(data, 2, len(data) - 2) == java_hash("TopicTest#key-1")
    with pytest.raises(ValueError):
        java_hash_utf8(data, 3, 2)


def test_tags_code():
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919
    assert tags_code("polygenelubricants") == -2147483648   # sign-extended, not masked


def test_index_key_hash():
    assert index_key_hash("polygenelubricants") == 0        # abs(MIN_VALUE) is still negative
    negative = next(text for text in (f"k{i}" * 3 for i in range(100)) if java_hash(text) < 0)
    assert index_key_hash(negative) == -java_hash(negative)
    assert index_key_hash("hello") == 99162322


def test_non_str_raises_type_error_and_subclasses_work():
    for function in (java_hash, tags_code, index_key_hash):
        with pytest.raises(TypeError):
            function(b"bytes")

    class Tag(str):
        pass

    assert java_hash(Tag("hello")) == tags_code(Tag("hello")) == 99162322
