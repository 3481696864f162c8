# Compile a selector tree once into a Python function that the pull path calls per message.
"""Code generation for SQL92 selectors.

A subscription's selector is parsed once and compiled here into one Python function of a
message's property dict. The generated code is specialised by what the tree shows statically:
a property compared with a string, integer, long, double or boolean constant becomes one
dictionary look-up and one conversion, ``IS [NOT] NULL`` a ``None`` test, ``IN`` a frozenset
membership, constant sub-expressions are folded, and AND/OR chains are flattened into
short-circuiting conditionals with SQL's three-valued logic. Shapes without a specialisation
(e.g. a boolean compared with a property) call the reference evaluation of their sub-tree
(:mod:`pybroker.filter.nodes`), so both paths share one semantics; the tests check they agree.

Where Java throws while evaluating (a string that is no number, a Boolean compared with a
string) the generated code raises JavaError and :meth:`CompiledSelector.matches` answers False,
as the Java broker drops a message whose selector throws.
"""
import math

from pybroker.filter.java_lang import (JavaError, JInt, java_compare, java_equals,
                                       parse_double, parse_int, parse_long)
from pybroker.filter.nodes import (BooleanCast, BooleanConstant, Compare, Constant, InList,
                                   Logic, Negate, Node, Not, Property)

__all__ = ["compile_node", "CompiledSelector"]

# Nesting of generated conditionals beyond which a sub-expression becomes its own function
# (CPython's parser refuses very deep nesting).
_INLINE_DEPTH_MAX = 24
# AND/OR chains longer than this become a function with one statement per operand.
_INLINE_OPERANDS_MAX = 6
_ORDER_TESTS = {">": "> 0", ">=": ">= 0", "<": "< 0", "<=": "<= 0"}
_PYTHON_ORDER = {">": ">", ">=": ">=", "<": "<", "<=": "<="}
_ANSWER_TESTS = {">": lambda answer: answer > 0, ">=": lambda answer: answer >= 0,
                 "<": lambda answer: answer < 0, "<=": lambda answer: answer <= 0}


def _int_of(text: str) -> int:
    # Integer.valueOf: plain short ASCII digits take the fast path.
    if text.isdigit() and len(text) < 10 and text.isascii():
        return int(text)
    return parse_int(text)


def _long_of(text: str) -> int:
    if text.isdigit() and len(text) < 19 and text.isascii():
        return int(text)
    return parse_long(text)


def _double_order(value: float, constant: float) -> int:
    # Double.compareTo for a finite or infinite constant (NaN above all, -0.0 below 0.0).
    if value < constant:
        return -1
    if value > constant:
        return 1
    return java_compare(value, constant)


def _equal_values(left, right):
    """doCreateEqual's evaluation for two evaluated operands."""
    if (left is None) != (right is None):
        return None if left is None else False
    if left is None or java_equals(left, right):
        return True
    return java_compare(left, right) == 0


def _strings_ordered(left, right, test) -> bool | None:
    """``prop <op> prop``: both converted with Double.valueOf (Java throws otherwise)."""
    if left is None or right is None:
        return None
    try:
        return test(java_compare(parse_double(left), parse_double(right)))
    except JavaError:
        raise JavaError("java.lang.RuntimeException", "illegal string comparison") from None


_HELPERS = {"_int": _int_of, "_long": _long_of, "_double": parse_double,
            "_dorder": _double_order, "_equal": _equal_values, "_sorder": _strings_ordered,
            "_JavaError": JavaError}


class _Generator:
    """Turns a tree into Python source: ``expression(node)`` returns an expression string in
    terms of ``g`` (the property dict's ``get``), constants and helpers in the namespace."""

    def __init__(self):
        self.namespace: dict = dict(_HELPERS)
        self.functions: list[str] = []
        self._names = 0

    def _name(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def constant(self, value) -> str:
        if value is None or type(value) is bool:
            return repr(value)
        name = self._name("c")
        self.namespace[name] = value
        return name

    def fallback(self, node: Node) -> str:
        """Evaluate ``node`` with the reference tree walk."""
        name = self._name("n")
        self.namespace[name] = node.evaluate
        return f"{name}(p)"

    def expression(self, node: Node, depth: int = 0) -> str:
        if depth > _INLINE_DEPTH_MAX:
            return self._function(node)
        if isinstance(node, Constant):                  # BooleanConstant too
            return self.constant(node.value)
        if isinstance(node, Property):
            return f"g({node.name!r})"
        if isinstance(node, Logic):
            return self._logic(node, depth)
        if isinstance(node, Not):
            inner = self._name("t")
            return (f"(None if ({inner} := {self.expression(node.operand, depth + 1)}) is None "
                    f"else not {inner})")
        if isinstance(node, BooleanCast):
            return f"(None if {self.expression(node.operand, depth + 1)} is None else False)"
        if isinstance(node, InList):
            return self._in_list(node, depth)
        if isinstance(node, Compare):
            return self._compare(node, depth)
        if isinstance(node, Negate):
            return self._negate(node, depth)
        return self.fallback(node)

    def _function(self, node: Node) -> str:
        name = self._name("f")
        self.functions.append(f"def {name}(p, g):\n    return {self.expression(node)}\n")
        return f"{name}(p, g)"

    def _logic(self, chain: Logic, depth: int) -> str:
        operands: list[Node] = []
        symbol = chain.symbol
        node: Node = chain
        while isinstance(node, Logic) and node.symbol == symbol:   # the left spine, flattened
            operands.append(node.right)
            node = node.left
        operands.append(node)
        operands.reverse()
        decisive = symbol == "||"
        if len(operands) > _INLINE_OPERANDS_MAX or depth + len(operands) > _INLINE_DEPTH_MAX:
            return self._chain(operands, decisive)
        names = [self._name("t") for _ in operands]
        # Left to right; the first decisive value ends it; else unknown if any was unknown.
        text = "(None if " + " or ".join(f"{name} is None" for name in names) + \
            f" else {not decisive})"
        for offset, (name, operand) in enumerate(reversed(list(zip(names, operands, strict=True)))):
            sub = self.expression(operand, depth + len(operands) - offset)
            text = f"({decisive} if ({name} := {sub}) is {decisive} else {text})"
        return text

    def _chain(self, operands: list, decisive: bool) -> str:
        """A long AND/OR chain as its own function, one statement per operand."""
        name = self._name("chain")
        lines = [f"def {name}(p, g):\n    unknown = False\n"]
        for operand in operands:
            lines.append(f"    t = {self.expression(operand)}\n"
                         f"    if t is {decisive}:\n        return {decisive}\n"
                         "    if t is None:\n        unknown = True\n")
        lines.append(f"    return None if unknown else {not decisive}\n")
        self.functions.append("".join(lines))
        return f"{name}(p, g)"

    def _in_list(self, node: InList, depth: int) -> str:
        value = self._name("v")
        items = self.constant(node.items)
        test = "not in" if node.negated else "in"
        operand = self.expression(node.operand, depth + 1)
        return (f"(None if type({value} := {operand}) is not str else "
                f"{value} {test} {items})")

    def _negate(self, node: Negate, depth: int) -> str:
        if type(node.operand) is Property:
            return "None"        # a property is a string: -string is null
        if type(node.operand) in (Constant, BooleanConstant):
            return self.constant(node.evaluate({}))
        return self.fallback(node)

    def _compare(self, node: Compare, depth: int) -> str:
        left, right, symbol = node.left, node.right, node.symbol
        if type(left) is Property:
            constant = _constant_value(right)
            if constant is not _NOT_CONSTANT:
                return self._property_constant(left.name, symbol, constant)
            if type(right) is Property:
                return self._two_properties(left.name, symbol, right.name)
        if symbol == "==":
            return (f"_equal({self.expression(left, depth + 1)}, "
                    f"{self.expression(right, depth + 1)})")
        return self.fallback(node)

    def _two_properties(self, left: str, symbol: str, right: str) -> str:
        if symbol == "==":
            return f"_equal(g({left!r}), g({right!r}))"
        test = self.constant(_ANSWER_TESTS[symbol])
        return f"_sorder(g({left!r}), g({right!r}), {test})"

    def _property_constant(self, name: str, symbol: str, constant) -> str:
        value = self._name("v")
        head = f"(None if ({value} := g({name!r})) is None else "
        if constant is None:                  # IS NULL (=, <> NULL never parse)
            return f"(g({name!r}) is None)"
        kind = type(constant)
        literal = self.constant(constant)
        if kind is str:
            if symbol == "==":
                return f"{head}{value} == {literal})"
            return self._fallback_compare(name, symbol, constant)
        if kind is bool:                      # only = reaches here (ordering refuses booleans)
            return f"{head}({value}.lower() == 'true') == {literal})"
        if kind is float:
            if math.isnan(constant):
                return self._fallback_compare(name, symbol, constant)
            test = "== 0" if symbol == "==" else _ORDER_TESTS[symbol]
            return f"{head}_dorder(_double({value}), {literal}) {test})"
        convert = "_int" if kind is JInt else "_long"
        operator = "==" if symbol == "==" else _PYTHON_ORDER[symbol]
        return f"{head}{convert}({value}) {operator} {literal})"

    def _fallback_compare(self, name: str, symbol: str, constant) -> str:
        return self.fallback(Compare(symbol, Property(name), Constant(constant)))


_NOT_CONSTANT = object()


def _constant_value(node: Node):
    if isinstance(node, Constant):
        return node.value
    if isinstance(node, Negate) and isinstance(node.operand, Constant):
        value = node.evaluate({})
        return _NOT_CONSTANT if value is None else value
    return _NOT_CONSTANT


class CompiledSelector:
    """A selector compiled to Python. ``matches(properties)`` is the pull path's test."""
    __slots__ = ("text", "tree", "source", "_function")

    def __init__(self, text: str, tree: Node):
        generator = _Generator()
        body = generator.expression(tree)
        source = "".join(generator.functions) + f"def match(p):\n    g = p.get\n" \
            f"    return {body}\n"
        namespace = generator.namespace
        exec(compile(source, f"<selector {text[:40]!r}>", "exec"), namespace)  # noqa: S102
        self.text = text
        self.tree = tree
        self.source = source
        self._function = namespace["match"]

    def evaluate(self, properties: dict):
        """True, False or None; JavaError where Java's evaluation throws."""
        return self._function(properties)

    def matches(self, properties: dict) -> bool:
        """Whether the Java broker would deliver a message with these properties."""
        try:
            return self._function(properties) is True
        except (JavaError, RecursionError):
            return False


def compile_node(text: str, tree: Node) -> CompiledSelector:
    """Compile a parsed selector (``text`` is kept for logs and caches)."""
    return CompiledSelector(text, tree)
