# Tests of the SQL92 selector package: Java value rules, parser remarks, evaluation semantics.
"""Goal: pybroker.filter parses, refuses and evaluates selectors with the Java broker's rules,
and the compiled code the pull path runs agrees with the reference tree walk. Method: tables of
Java facts (each row observed on RocketMQ's filter through tools/java_compat/SqlOracle.java;
tests/compat/test_sql92_oracle.py re-checks thousands of cases against it), plus seeded random
selectors and property maps run through both evaluation paths.
"""
import math

import pytest

from pybroker.filter import CACHE_ENTRIES_MAX, cached_selector, compile_selector
from pybroker.filter.java_lang import (JavaError, JInt, JLong, double_to_string, java_compare,
                                       parse_double, parse_int, parse_long, string_compare)
from pybroker.filter.parser import NESTING_MAX, SelectorError, parse
from tests import sql92_cases


@pytest.mark.parametrize("text, value", [("5", 5), ("+5", 5), ("-2147483648", -(1 << 31)),
                                         ("\u0663", 3), ("007", 7)])
def test_integer_value_of_accepts(text, value):
    assert parse_int(text) == value and type(parse_int(text)) is JInt


@pytest.mark.parametrize("text", ["", " 5", "5 ", "1_0", "2147483648", "5.0", "0x10", "+"])
def test_integer_value_of_refuses(text):
    with pytest.raises(JavaError, match="NumberFormatException"):
        parse_int(text)
    assert type(parse_long("3000000000")) is JLong


@pytest.mark.parametrize("text, value", [
    ("1.5", 1.5), (" 7 ", 7.0), ("1e3", 1000.0), ("1.5f", 1.5), ("2d", 2.0), (".5", 0.5),
    ("5.", 5.0), ("-0", -0.0), ("Infinity", math.inf), ("-Infinity", -math.inf),
    ("0x1p3", 8.0), ("1e400", math.inf), ("4.9E-324", 5e-324)])
def test_double_value_of_accepts(text, value):
    assert parse_double(text) == value


@pytest.mark.parametrize("text", ["", "nan", "inf", "1_0", "\u0663", "1e", "0x10", "abc",
                                  "1.5ff", "--1"])
def test_double_value_of_refuses(text):
    with pytest.raises(JavaError, match="NumberFormatException"):
        parse_double(text)
    assert math.isnan(parse_double("NaN")) and math.isnan(parse_double("-NaN"))


@pytest.mark.parametrize("value, text", [
    (1.0, "1.0"), (100.0, "100.0"), (0.001, "0.001"), (1e-4, "1.0E-4"), (1e7, "1.0E7"),
    (12345678.9, "1.23456789E7"), (-0.0, "-0.0"), (1.7976931348623157e308,
                                                   "1.7976931348623157E308"),
    (5e-324, "4.9E-324"), (math.nan, "NaN"), (-math.inf, "-Infinity"), (1.5, "1.5")])
def test_double_to_string(value, text):
    assert double_to_string(value) == text


def test_java_comparisons():
    assert java_compare(math.nan, math.inf) == 1 and java_compare(math.nan, math.nan) == 0
    assert java_compare(-0.0, 0.0) == -1
    assert java_compare("5", JInt(5)) == 0 and java_compare(JLong(5), 5.5) == -1
    assert java_compare(True, JInt(1)) == -1          # Boolean against a number: Java's -1
    with pytest.raises(JavaError, match="ClassCastException"):
        java_compare(True, "true")
    # UTF-16 order: U+FF5E sorts after a surrogate pair's high unit U+D83D... in Java.
    assert string_compare("\uff5e", "\U0001f600") == 1 and "\uff5e" < "\U0001f600"


@pytest.mark.parametrize("expression, remark", [
    ("a > 'x'", "java.lang.RuntimeException: Value ''x'' cannot be compared."),
    ("5", "org.apache.rocketmq.filter.parser.ParseException: Expression will not result in a "
          "boolean value: 5"),
    ("a BETWEEN 5 AND 3", "java.lang.RuntimeException: Illegal values of between, left "
                          "value(5) must less than or equal to right value(3)"),
    ("a > 0.0", "java.lang.RuntimeException: 0.0 is less than 4.9E-324"),
    ("a = #", "org.apache.rocketmq.filter.parser.TokenMgrError: Lexical error at line 1, "
              "column 6.  Encountered: <EOF> after : \"\""),
    ("a IS 5", 'org.apache.rocketmq.filter.parser.ParseException: Encountered " '
               '<DECIMAL_LITERAL> "5 "" at line 1, column 6.\nWas expecting:\n    "NOT" ...\n    '),
    ("'open", "org.apache.rocketmq.filter.parser.TokenMgrError: Lexical error at line 1, "
              "column 6.  Encountered: <EOF> after : \"\\'open\""),
])
def test_refusals_carry_java_remarks(expression, remark):
    with pytest.raises(SelectorError) as refused:
        parse(expression)
    assert refused.value.remark == remark


def test_java_stops_after_one_expression():
    # Java's grammar has no end-of-input token: what follows a selector only has to lex.
    assert parse("a = 1 garbage ) 5").java_string() == "(a == 1)"
    assert parse("a = 1 - 2").java_string() == "(a == 1)"


def test_nesting_and_length_limits():
    deep = "(" * (NESTING_MAX + 1) + "a = 1" + ")" * (NESTING_MAX + 1)
    with pytest.raises(SelectorError, match="StackOverflowError"):
        parse(deep)
    with pytest.raises(SelectorError, match="longer than"):
        parse("a = '" + "x" * 70_000 + "'")
    chain = compile_selector(" OR ".join(f"a = {n}" for n in range(5000)))
    assert chain.matches({"a": "4999"}) and not chain.matches({"a": "5000"})


# (selector, properties, Java's evaluation: True, False, None or "error")
SEMANTICS = [
    ("a", {"a": "true"}, False), ("a", {}, None), ("NULL", {}, None), ("NOT NULL", {}, None),
    ("a = 5", {"a": "5"}, True), ("a = 5", {"a": "5.0"}, "error"), ("a = 5", {}, None),
    ("5 = a", {}, False), ("5 <> a", {}, True), ("a <> 5", {}, None),
    ("a > 5", {"a": "3000000000"}, "error"), ("a > 5000000000", {"a": "3000000000"}, False),
    ("a > 1.0", {"a": "NaN"}, True), ("a < 1.0", {"a": "-0"}, True),
    ("a = TRUE", {"a": "TRUE"}, True), ("TRUE = a", {"a": "true"}, "error"),
    ("a = 1 OR b = 'x'", {"a": "abc", "b": "x"}, "error"),
    ("b = 'x' OR a = 1", {"a": "abc", "b": "x"}, True),
    ("a = 1 AND b = 'x'", {"a": "2"}, False), ("a = 1 OR b = 'x'", {"a": "2"}, None),
    ("a > b", {"a": "2", "b": "1.5"}, True), ("a > b", {"a": "x", "b": "1"}, "error"),
    ("a IN ('x', 'y')", {"a": "y"}, True), ("a NOT IN ('x')", {}, None),
    ("a BETWEEN 1 AND 5", {"a": "+5"}, True), ("-a = -1", {"a": "1"}, None),
    ("a IS NULL", {}, True), ("a IS NOT NULL", {"a": "x"}, True),
    ("TAGS = 'TagA'", {"TAGS": "TagA"}, True), ("NOT a = 5", {"a": "5"}, False),
]


def _outcome(evaluate, properties):
    try:
        return evaluate(properties)
    except JavaError:
        return "error"


@pytest.mark.parametrize("expression, properties, expected", SEMANTICS)
def test_java_evaluation_semantics(expression, properties, expected):
    tree, compiled = parse(expression), compile_selector(expression)
    assert _outcome(tree.evaluate, properties) == expected
    assert _outcome(compiled.evaluate, properties) == expected
    assert compiled.matches(properties) is (expected is True)


def test_compiled_code_agrees_with_the_tree_walk(rand):
    checked = 0
    for _ in range(3000):
        expression = sql92_cases.random_expression(rand)
        try:
            tree = parse(expression)
        except SelectorError:
            continue
        compiled = compile_selector(expression)
        for _ in range(4):
            properties = sql92_cases.random_properties(rand)
            assert _outcome(compiled.evaluate, properties) == \
                _outcome(tree.evaluate, properties), (expression, properties, compiled.source)
            checked += 1
    assert checked > 2000


def test_cache_is_bounded_and_caches_refusals():
    first = cached_selector("a = 1")
    assert cached_selector("a = 1") is first
    with pytest.raises(SelectorError):
        cached_selector("a =")
    for number in range(CACHE_ENTRIES_MAX + 10):
        cached_selector(f"a = {number}")
    assert cached_selector("a = 1") is not first
