# SQL92 selector cases shared by the filter tests: a fixed table and seeded random generators.
"""Selectors and message property maps for the SQL92 tests.

:data:`TABLE_MESSAGES` and :data:`TABLE_EXPRESSIONS` are the fixed table run against both
brokers with real clients. :func:`random_expression` (grammar-driven, with token and character
mutations) and :func:`random_properties` feed the differential tests against RocketMQ's own
filter and the fuzzer; both take a ``random.Random`` so a failing seed can be replayed.
"""
import random

IDENTIFIERS = ("a", "b", "c", "TAGS", "KEYS", "n", "f", "s", "flag", "$d", "_e", "A", "b2")
VALUES = ("1", "5", "-3", "+5", " 5", "5 ", "5.0", "1e3", "1.5f", "NaN", "-NaN", "Infinity",
          "-0", "0", "abc", "TRUE", "true", "false", "x", "", "3000000000",
          "9223372036854775808", "\uff10", "\u0663", "1_0", "0x10", "0x1p3", "TagA", "TagB",
          "\u03c0", "a'b", "2147483647", "-2147483648", "1e400", "007", "10", "4.9E-324")
LITERALS = ("0", "1", "5", "10", "3", "2147483647", "2147483648", "9223372036854775807",
            "9223372036854775808", "5L", "5l", "1.5", ".5", "5.", "1e3", "1E-3", "0.0",
            "1e400", "1e-400", "'x'", "'abc'", "'a''b'", "''", "'TagA'", "'5'", "'1e3'",
            "TRUE", "true", "False", "NULL", "007", "0x1", "'\u03c0'")
OPERATORS = ("=", "<>", ">", ">=", "<", "<=")
NOISE = ("#", "!", '"', "'", ".", "/", "*", "/*", "*/", "--", "\n", "\t", "\r", "\f", "(",
         ")", ",", "+", "-", "@", "\u00e9", "\U0001f600", "0", "a", " ", "IS", "NOT", "IN")

# The table both brokers answer with real clients: property maps (as sent; no TAGS key means
# the message is sent without a tag) and the selectors.
TABLE_MESSAGES = (
    {"TAGS": "TagA", "a": "1", "s": "abc", "f": "1.5", "flag": "true"},
    {"TAGS": "TagB", "a": "5", "s": "xyz", "f": "-2.25", "flag": "false"},
    {"TAGS": "TagA", "a": "10", "s": "a'b", "f": "NaN", "n": "x"},
    {"TAGS": "TagC", "a": "abc", "f": "1e3"},
    {"a": "3000000000", "s": "TagA", "f": "5"},
    {"TAGS": "TagB", "a": "-3", "f": " 7 ", "flag": "TRUE", "n": "1"},
    {"TAGS": "TagA", "b": "5.0", "s": "\u03c0", "f": "Infinity"},
    {"TAGS": "TagC", "a": "+5", "b": "5", "flag": "yes"},
)
TABLE_EXPRESSIONS = (
    "TRUE", "FALSE", "NULL", "a = 1", "a = 5", "a <> 5", "a > 1", "a >= 5", "a < 10",
    "a <= -3", "a > 2147483647", "a > 2147483648", "a = 5.0", "b = 5", "b = 5.0", "f > 1",
    "f > 1.0", "f < 0.5", "f >= 1000.0", "f = 1.5", "a BETWEEN 1 AND 5",
    "a NOT BETWEEN 1 AND 5", "TAGS = 'TagA'", "TAGS <> 'TagA'", "TAGS IN ('TagA', 'TagB')",
    "TAGS NOT IN ('TagA')", "TAGS IS NULL", "TAGS IS NOT NULL", "s = 'abc'", "s = 'a''b'",
    "s = ''", "s = '\u03c0'", "flag = TRUE", "flag = FALSE", "flag <> TRUE", "flag",
    "NOT flag", "n IS NULL", "n IS NOT NULL", "n = 'x' OR a = 1", "n = 'x' AND a = 1",
    "a = 1 OR a = 5 OR a = 10", "(a > 1 AND a < 10) OR TAGS = 'TagC'", "NOT (a = 1)",
    "NOT a = 5", "a = 1 garbage", "-a = -1", "a = -3", "a = +5", "5 = a", "5 <> a",
    "a IN ('1', '5')", "a NOT IN ('1', '5', '10', 'abc', '-3')", "TAGS = 'TagA' AND f > 1",
    "a > 1 AND s = 'xyz'", "a > b", "b > a", "a = b", "f <> f", "a = 1 OR TRUE",
    "a = 'abc' OR a = 1", "a > 0.5 OR n = 'x'", "a BETWEEN -5 AND 5.5",
    "TAGS = 'TagA' -- trailing comment\n", "/* comment */ a = 1", "a\t=\t1", "A = 1",
    "a = 1 AND NULL", "a = 1 OR NULL", "NOT NULL", "b > a OR TRUE",
)
# Selectors both brokers refuse (CHECK_CLIENT_CONFIG remarks compared exactly).
TABLE_BAD_EXPRESSIONS = (
    "", "a =", "a = = 1", "a > 'x'", "a BETWEEN 5 AND 1", "a IN ()", "1 IN ('1')", "5",
    "'x'", "a = NULL", "TRUE = 1", "a IS 5", "a NOT 5", "(a = 1", "a = 1 #", "a = #",
    "a > 0.0", "a = 99999999999999999999", "a != 1", "a == 1", "a = 'open", "a = 1 AND",
    "a BETWEEN TRUE AND FALSE", "a BETWEEN NULL AND 1", "- a", "NOT 5", "a > TRUE",
    "a\n=\t", "/* open comment", "a = .", "a = 1e400", "(a > 1) > 0",
)


def _literal(rand: random.Random) -> str:
    return rand.choice(LITERALS)


def _operand(rand: random.Random, depth: int) -> str:
    roll = rand.random()
    if roll < 0.5:
        return rand.choice(IDENTIFIERS)
    if roll < 0.8 or depth > 3:
        return _literal(rand)
    if roll < 0.9:
        return f"({random_condition(rand, depth + 1)})"
    return rand.choice(("-", "+", "NOT ")) + _operand(rand, depth + 1)


def _comparison(rand: random.Random, depth: int) -> str:
    left = _operand(rand, depth)
    roll = rand.random()
    if roll < 0.55:
        return f"{left} {rand.choice(OPERATORS)} {_operand(rand, depth)}"
    if roll < 0.7:
        items = ", ".join(rand.choice(LITERALS[20:26]) for _ in range(rand.randint(1, 6)))
        return f"{left} {rand.choice(('IN', 'NOT IN'))} ({items})"
    if roll < 0.8:
        negated = rand.choice(("", "NOT "))
        return f"{left} {negated}BETWEEN {_operand(rand, depth)} AND {_operand(rand, depth)}"
    if roll < 0.9:
        return f"{left} IS {rand.choice(('', 'NOT '))}NULL"
    return left


def random_condition(rand: random.Random, depth: int = 0) -> str:
    """A random selector, valid by grammar though often refused by Java's type checks."""
    parts = [_comparison(rand, depth)]
    while rand.random() < 0.35 and len(parts) < 6:
        parts.append(rand.choice((" AND ", " OR ")))
        parts.append(_comparison(rand, depth))
    return "".join(parts)


def mutate(rand: random.Random, text: str) -> str:
    """Insert, delete or replace a few characters or noise tokens."""
    chars = list(text)
    for _ in range(rand.randint(1, 3)):
        position = rand.randint(0, len(chars))
        roll = rand.random()
        if roll < 0.4:
            chars.insert(position, rand.choice(NOISE))
        elif roll < 0.7 and chars:
            del chars[min(position, len(chars) - 1)]
        elif chars:
            chars[min(position, len(chars) - 1)] = rand.choice(NOISE)
    return "".join(chars)


def token_soup(rand: random.Random) -> str:
    """Random tokens and noise with random spacing: mostly not a selector at all."""
    pieces = IDENTIFIERS + LITERALS + OPERATORS + NOISE + ("AND", "OR", "BETWEEN", "NULL")
    return "".join(rand.choice(pieces) + rand.choice(("", " ", " ", "\t"))
                   for _ in range(rand.randint(0, 12)))


def random_expression(rand: random.Random) -> str:
    """A random selector: mostly grammatical, a third mutated into near misses, some soup."""
    if rand.random() < 0.15:
        return token_soup(rand)
    text = random_condition(rand)
    if rand.random() < 0.35:
        text = mutate(rand, text)
    if rand.random() < 0.2:
        text = rand.choice(("", " ", "\t", "\n")) + text + rand.choice(("", " ", "\n", "--x"))
    return text


def random_properties(rand: random.Random) -> dict[str, str]:
    """A random message property map over the identifiers the expressions use."""
    return {name: rand.choice(VALUES) for name in IDENTIFIERS if rand.random() < 0.45}
