# The SQL92 selector tree: node kinds, Java's printed form, and the reference evaluation.
"""Selector tree nodes with the Java filter's semantics.

Each node knows what the Java expression class it stands for knows: whether it is a constant,
a property or a boolean expression (the parser's type checks ask), how Java prints it (error
remarks quote expressions), and how it evaluates. :meth:`Node.evaluate` walks the tree over a
message's properties (``dict[str, str]``) and returns ``True``, ``False`` or ``None`` (SQL's
unknown) — or raises :class:`~pybroker.filter.java_lang.JavaError` where Java throws, which
makes the whole selector fail for that message. This walk is the reference semantics; the
pull path runs the code :mod:`pybroker.filter.compiler` generates from the same tree.
"""
from pybroker.filter.java_lang import (JavaError, double_to_string, java_compare, java_equals,
                                       parse_double)

__all__ = ["Node", "Constant", "BooleanConstant", "Property", "Negate", "Not", "BooleanCast",
           "Compare", "Logic", "InList", "encode_string"]


def encode_string(text: str) -> str:
    """ConstantExpression.encodeString: single quotes, inner quotes doubled."""
    return "'" + text.replace("'", "''") + "'"


class Node:
    """Base of every selector node."""
    __slots__ = ()
    is_constant = False
    is_boolean = False          # Java's BooleanExpression
    is_property = False

    def evaluate(self, properties: dict):
        raise NotImplementedError

    def java_string(self) -> str:
        raise NotImplementedError


class Constant(Node):
    """A literal: ``str``, JInt, JLong or ``float`` value (Java's ConstantExpression)."""
    __slots__ = ("value",)
    is_constant = True

    def __init__(self, value):
        self.value = value

    def evaluate(self, properties: dict):
        return self.value

    def java_string(self) -> str:
        value = self.value
        if type(value) is str:
            return encode_string(value)
        if type(value) is float:
            return double_to_string(value)
        return str(int(value))


class BooleanConstant(Constant):
    """TRUE, FALSE or NULL (Java's BooleanConstantExpression): a constant and a boolean."""
    __slots__ = ()
    is_boolean = True

    def java_string(self) -> str:
        return {True: "TRUE", False: "FALSE", None: "NULL"}[self.value]


class Property(Node):
    """A message property by name; its value is the property's string or None."""
    __slots__ = ("name",)
    is_property = True

    def __init__(self, name: str):
        self.name = name

    def evaluate(self, properties: dict):
        return properties.get(self.name)

    def java_string(self) -> str:
        return self.name


class Negate(Node):
    """Unary minus: negates a number, null for anything else (a property is a string)."""
    __slots__ = ("operand",)

    def __init__(self, operand: Node):
        self.operand = operand

    def evaluate(self, properties: dict):
        value = self.operand.evaluate(properties)
        if value is None or type(value) in (str, bool):
            return None
        return type(value)(-value)

    def java_string(self) -> str:
        return f"(- {self.operand.java_string()})"


class Not(Node):
    """Logical NOT of a boolean expression (unknown stays unknown)."""
    __slots__ = ("operand",)
    is_boolean = True

    def __init__(self, operand: Node):
        self.operand = operand

    def evaluate(self, properties: dict):
        value = self.operand.evaluate(properties)
        return None if value is None else not value

    def java_string(self) -> str:
        return f"(NOT {self.operand.java_string()})"


class BooleanCast(Node):
    """A property used as a condition: unknown when absent, false otherwise (values are
    strings, never Booleans)."""
    __slots__ = ("operand",)
    is_boolean = True

    def __init__(self, operand: Node):
        self.operand = operand

    def evaluate(self, properties: dict):
        value = self.operand.evaluate(properties)
        if value is None:
            return None
        return value if type(value) is bool else False

    def java_string(self) -> str:
        return self.operand.java_string()


_ORDERING = {">": lambda answer: answer > 0, ">=": lambda answer: answer >= 0,
             "<": lambda answer: answer < 0, "<=": lambda answer: answer <= 0}


class Compare(Node):
    """``==`` (= and IS NULL), ``>``, ``>=``, ``<``, ``<=`` with Java's conversions."""
    __slots__ = ("symbol", "left", "right")
    is_boolean = True

    def __init__(self, symbol: str, left: Node, right: Node):
        self.symbol = symbol
        self.left = left
        self.right = right

    def evaluate(self, properties: dict):
        if self.symbol == "==":
            return self._equal(properties)
        left = self.left.evaluate(properties)
        if left is None:
            return None
        right = self.right.evaluate(properties)
        if right is None:
            return None
        if type(left) is str and type(right) is str:
            try:
                left, right = parse_double(left), parse_double(right)
            except JavaError:
                raise JavaError("java.lang.RuntimeException",
                                "It's illegal to compare string by '>=', '>', '<', '<='.") \
                    from None
        return _ORDERING[self.symbol](java_compare(left, right))

    def _equal(self, properties: dict):
        left = self.left.evaluate(properties)
        right = self.right.evaluate(properties)
        if (left is None) != (right is None):
            return None if left is None else False
        if left is None or java_equals(left, right):
            return True
        return java_compare(left, right) == 0

    def java_string(self) -> str:
        return f"({self.left.java_string()} {self.symbol} {self.right.java_string()})"


class Logic(Node):
    """``&&`` / ``||`` with SQL's three-valued logic, evaluated left first."""
    __slots__ = ("symbol", "left", "right")
    is_boolean = True

    def __init__(self, symbol: str, left: Node, right: Node):
        self.symbol = symbol
        self.left = left
        self.right = right

    def evaluate(self, properties: dict):
        decisive = self.symbol == "||"       # the value that decides at once
        left = self.left.evaluate(properties)
        if left is decisive:
            return decisive
        right = self.right.evaluate(properties)
        if right is decisive:
            return decisive
        if left is None or right is None:
            return None
        return not decisive

    def java_string(self) -> str:
        return f"({self.left.java_string()} {self.symbol} {self.right.java_string()})"


class InList(Node):
    """``property [NOT] IN ('a', 'b', ...)``; ``printed`` is Java's iteration order of the
    list (a HashSet from five items on)."""
    __slots__ = ("operand", "items", "printed", "negated")
    is_boolean = True

    def __init__(self, operand: Node, items: frozenset, printed: list, negated: bool):
        self.operand = operand
        self.items = items
        self.printed = printed
        self.negated = negated

    def evaluate(self, properties: dict):
        value = self.operand.evaluate(properties)
        if value is None or type(value) is not str:
            return None
        return (value in self.items) != self.negated

    def java_string(self) -> str:
        symbol = "NOT IN" if self.negated else "IN"
        return f"{self.operand.java_string()} {symbol} ( {', '.join(self.printed)} )"
