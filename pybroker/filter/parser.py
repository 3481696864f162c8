# Parse an SQL92 selector the way the Java broker's parser does, errors and remarks included.
"""Recursive-descent parser for RocketMQ's SQL92 selectors.

Grammar (lowest precedence first; ``*`` repeats)::

    selector   := or
    or         := and (OR and)*
    and        := equality (AND equality)*
    equality   := comparison ('=' comparison | '<>' comparison | IS NULL | IS NOT NULL)*
    comparison := unary ('>' unary | '>=' unary | '<' unary | '<=' unary
                         | [NOT] BETWEEN unary AND unary | [NOT] IN '(' string (',' string)* ')')*
    unary      := '+' unary | '-' unary | NOT unary | primary
    primary    := literal | identifier | '(' or ')'

Like Java's parser, it stops after the first complete expression (what follows is ignored as
long as it lexes), and it applies the Java filter's checks while it builds the tree: operands
of AND/OR/NOT must be boolean (a property is cast), ``> >= < <=`` take no string, boolean or
NULL constant and no boolean expression, ``=`` takes no NULL constant, BETWEEN constants must
be ordered, IN needs a property, float literals must be within (0, Double.MAX_VALUE].
A failure raises :class:`SelectorError`, whose ``remark`` is what the Java broker answers
(``cause.toString()`` of its MQFilterException: class name and JavaCC's message).
"""
from pybroker.filter import lexer as lx
from pybroker.filter.java_lang import (JavaError, JInt, JLong, hash_set_order, java_compare,
                                       runtime_error, to_java_string, from_java_chars,
                                       DOUBLE_MAX_VALUE, DOUBLE_MIN_VALUE, INT_MAX, INT_MIN,
                                       LONG_MAX)
from pybroker.filter.nodes import (BooleanCast, BooleanConstant, Compare, Constant, InList,
                                   Logic, Negate, Node, Not, Property)

__all__ = ["SelectorError", "parse", "NESTING_MAX", "SELECTOR_CHARS_MAX"]

PARSE_EXCEPTION = "org.apache.rocketmq.filter.parser.ParseException"
# Parentheses/unary operators nested deeper than this fail as Java's stack overflows (Java's
# own limit depends on its thread stack size; this one keeps Python's recursion bounded).
NESTING_MAX = 100
# Selectors longer than this are refused before parsing (Java has no such limit).
SELECTOR_CHARS_MAX = 65536
_EOL = "\n"

# The token kinds each choice point of Java's parser accepts (its jj_la1 sets): when a token
# fits none, its error lists the kinds of every choice point tried at that token.
_CHOICES = {
    "or": (lx.OR,), "and": (lx.AND,), "equality": (lx.IS, lx.EQ, lx.NE),
    "equality-op": (lx.EQ, lx.NE), "is-not-null": (lx.IS,),
    "comparison": (lx.NOT, lx.BETWEEN, lx.IN, lx.GT, lx.GE, lx.LT, lx.LE),
    "in-list": (lx.COMMA,), "not-in-list": (lx.COMMA,),
    "comparison-op": (lx.GT, lx.GE, lx.LT, lx.LE, lx.BETWEEN), "in": (lx.IN,),
    "unary": (lx.NOT, lx.TRUE, lx.FALSE, lx.NULL, lx.DECIMAL, lx.FLOAT, lx.STRING, lx.ID,
              lx.LPAREN, lx.MINUS),
    "primary": (lx.TRUE, lx.FALSE, lx.NULL, lx.DECIMAL, lx.FLOAT, lx.STRING, lx.ID,
                lx.LPAREN),
    "literal": (lx.STRING, lx.DECIMAL, lx.FLOAT, lx.TRUE, lx.FALSE, lx.NULL),
}
_LITERALS = frozenset(_CHOICES["literal"])
_ORDERING = {lx.GT: ">", lx.GE: ">=", lx.LT: "<", lx.LE: "<="}


class SelectorError(Exception):
    """A selector Java refuses; ``remark`` is the Java broker's CHECK_CLIENT_CONFIG remark."""

    def __init__(self, cause: JavaError):
        super().__init__(str(cause))
        self.cause = cause
        self.remark = str(cause)


def parse(text: str) -> Node:
    """The selector tree of ``text``; SelectorError when Java would refuse it."""
    if len(text) > SELECTOR_CHARS_MAX:
        raise SelectorError(runtime_error(
            f"the selector is longer than {SELECTOR_CHARS_MAX} characters"))
    try:
        return _Parser(text).selector()
    except JavaError as error:
        raise SelectorError(error) from None
    except RecursionError:
        raise SelectorError(JavaError("java.lang.StackOverflowError")) from None


def _parse_error(message: str) -> JavaError:
    return JavaError(PARSE_EXCEPTION, message)


def _as_boolean(node: Node) -> Node:
    """Java's asBooleanExpression."""
    if node.is_boolean:
        return node
    if node.is_property:
        return BooleanCast(node)
    raise _parse_error(f"Expression will not result in a boolean value: {node.java_string()}")


def _check_ordered_operand(node: Node) -> None:
    """checkLessThanOperand: numbers, properties and negations only."""
    if isinstance(node, Constant):
        value = node.value
        if type(value) in (JInt, JLong, float):
            return
        raise runtime_error(f"Value '{node.java_string()}' cannot be compared.")
    if node.is_boolean:
        raise runtime_error(f"Value '{node.java_string()}' cannot be compared.")


def _ordered(symbol: str, left: Node, right: Node) -> Node:
    _check_ordered_operand(left)
    _check_ordered_operand(right)
    return Compare(symbol, left, right)


def _equal(left: Node, right: Node) -> Node:
    """createEqual: no NULL constant; a boolean constant only against a boolean constant."""
    for operand in (left, right):
        if isinstance(operand, Constant) and operand.value is None:
            raise runtime_error(f"'{operand.java_string()}' cannot be compared.")
    if left.is_constant and right.is_constant and left.is_boolean and not right.is_boolean:
        raise runtime_error(f"'{left.java_string()}' cannot be compared with "
                            f"'{right.java_string()}'")
    return Compare("==", left, right)


def _between(value: Node, low: Node, high: Node) -> Node:
    if isinstance(low, Constant) and isinstance(high, Constant):
        if low.value is None or high.value is None:
            raise runtime_error("Illegal values of between, values can not be null!")
        if java_compare(high.value, low.value) < 0:
            raise runtime_error(
                f"Illegal values of between, left value({to_java_string(low.value)}) must "
                f"less than or equal to right value({to_java_string(high.value)})")
    return Logic("&&", _ordered(">=", value, low), _ordered("<=", value, high))


def _decimal(image: str) -> Constant:
    text = image[:-1] if image[-1] in "lL" else image
    value = int(text)
    if value > LONG_MAX:
        raise JavaError("java.lang.NumberFormatException", f'For input string: "{text}"')
    return Constant(JInt(value) if INT_MIN <= value <= INT_MAX else JLong(value))


def _float(image: str) -> Constant:
    value = float(image)
    if value > DOUBLE_MAX_VALUE:
        raise runtime_error(f"{image} is greater than 1.7976931348623157E308")
    if value < DOUBLE_MIN_VALUE:
        raise runtime_error(f"{image} is less than 4.9E-324")
    return Constant(value)


def _string_value(image: str) -> str:
    return from_java_chars(image[1:-1].replace("''", "'"))


class _Parser:
    """One parse. ``_at``: index of the next token; ``_generation``: tokens consumed (Java's
    jj_gen); ``_tried``: choice point -> generation it last failed to match at."""

    def __init__(self, text: str):
        self._lexer = lx.Lexer(text)
        self._at = 0
        self._generation = 0
        self._tried: dict[str, int] = {}
        self._depth = 0

    # --- tokens ---------------------------------------------------------------------------------
    def _kind(self, ahead: int = 0) -> int:
        return self._lexer.token(self._at + ahead).kind

    def _tried_here(self, choice: str) -> None:
        self._tried[choice] = self._generation

    def _consume(self, kind: int) -> lx.Token:
        token = self._lexer.token(self._at)
        if token.kind != kind:
            raise self._error(kind)
        self._at += 1
        self._generation += 1
        return token

    def _error(self, wanted: int = -1) -> JavaError:
        """JavaCC's ParseException at the next token: what every choice point tried here
        (and the kind a failed consume wanted) would have accepted."""
        expected = {wanted} if wanted >= 0 else set()
        for choice, generation in self._tried.items():
            if generation == self._generation:
                expected.update(_CHOICES[choice])
        token = self._lexer.token(self._at)
        if token.kind == lx.EOF:
            shown = "<EOF>"
        else:
            shown = f' {lx.TOKEN_IMAGES[token.kind]} "{lx.add_escapes(token.image)} "'
        if not expected:
            shown = ""
        lines = "".join(f"{lx.TOKEN_IMAGES[kind]} ...{_EOL}    " for kind in sorted(expected))
        heading = "Was expecting:" if len(expected) == 1 else "Was expecting one of:"
        return _parse_error(f'Encountered "{shown}" at line {token.line}, column '
                            f"{token.column}.{_EOL}{heading}{_EOL}    {lines}")

    def _nested(self) -> None:
        self._depth += 1
        if self._depth > NESTING_MAX:
            raise JavaError("java.lang.StackOverflowError")

    # --- grammar --------------------------------------------------------------------------------
    def selector(self) -> Node:
        return _as_boolean(self._or())

    def _or(self) -> Node:
        left = self._and()
        while self._kind() == lx.OR:
            self._consume(lx.OR)
            right = self._and()
            left = Logic("||", _as_boolean(left), _as_boolean(right))
        self._tried_here("or")
        return left

    def _and(self) -> Node:
        left = self._equality()
        while self._kind() == lx.AND:
            self._consume(lx.AND)
            right = self._equality()
            left = Logic("&&", _as_boolean(left), _as_boolean(right))
        self._tried_here("and")
        return left

    def _equality(self) -> Node:
        left = self._comparison()
        while True:
            kind = self._kind()
            if kind == lx.EQ or kind == lx.NE:
                self._consume(kind)
                equal = _equal(left, self._comparison())
                left = equal if kind == lx.EQ else Not(equal)
            elif kind == lx.IS:
                self._tried_here("equality-op")
                if self._kind(1) == lx.NULL:
                    self._consume(lx.IS)
                    self._consume(lx.NULL)
                    left = Compare("==", left, BooleanConstant(None))
                else:
                    self._consume(lx.IS)
                    self._consume(lx.NOT)
                    self._consume(lx.NULL)
                    left = Not(Compare("==", left, BooleanConstant(None)))
            else:
                self._tried_here("equality")
                return left

    def _comparison(self) -> Node:
        left = self._unary()
        while True:
            kind = self._kind()
            if kind in _ORDERING:
                self._consume(kind)
                left = _ordered(_ORDERING[kind], left, self._unary())
            elif kind == lx.BETWEEN:
                self._consume(lx.BETWEEN)
                left = self._between_rest(left, negated=False)
            elif kind == lx.NOT or kind == lx.IN:
                left = self._not_between_or_in(left, kind)
            else:
                self._tried_here("comparison")
                return left

    def _between_rest(self, value: Node, negated: bool) -> Node:
        low = self._unary()
        self._consume(lx.AND)
        high = self._unary()
        if not negated:
            return _between(value, low, high)
        return Logic("||", _ordered("<", value, low), _ordered(">", value, high))

    def _not_between_or_in(self, left: Node, kind: int) -> Node:
        self._tried_here("comparison-op")
        if kind == lx.NOT and self._kind(1) == lx.BETWEEN:
            self._consume(lx.NOT)
            self._consume(lx.BETWEEN)
            return self._between_rest(left, negated=True)
        if kind == lx.IN:
            self._consume(lx.IN)
            return self._in_rest(left, negated=False, choice="in-list")
        self._tried_here("in")
        if self._kind(1) == lx.IN:
            self._consume(lx.NOT)
            self._consume(lx.IN)
            return self._in_rest(left, negated=True, choice="not-in-list")
        raise self._error()

    def _in_rest(self, left: Node, negated: bool, choice: str) -> Node:
        self._consume(lx.LPAREN)
        items = [_string_value(self._consume(lx.STRING).image)]
        while self._kind() == lx.COMMA:
            self._consume(lx.COMMA)
            items.append(_string_value(self._consume(lx.STRING).image))
        self._tried_here(choice)
        self._consume(lx.RPAREN)
        if not left.is_property:
            raise runtime_error(f"Expected a property for In expression, got: "
                                f"{left.java_string()}")
        printed = items if len(items) < 5 else hash_set_order(items)
        return InList(left, frozenset(items), printed, negated)

    def _unary(self) -> Node:
        self._nested()
        try:
            kind = self._kind()
            if kind == lx.PLUS and _Recognizer(self._lexer).unary(self._at + 1) is not None:
                self._consume(lx.PLUS)
                return self._unary()
            if kind == lx.MINUS:
                self._consume(lx.MINUS)
                return Negate(self._unary())
            if kind == lx.NOT:
                self._consume(lx.NOT)
                return Not(_as_boolean(self._unary()))
            if kind in _CHOICES["primary"]:
                return self._primary(kind)
            self._tried_here("unary")
            raise self._error()
        finally:
            self._depth -= 1

    def _primary(self, kind: int) -> Node:
        if kind in _LITERALS:
            return self._literal(kind)
        if kind == lx.ID:
            return Property(self._consume(lx.ID).image)
        self._consume(lx.LPAREN)
        inner = self._or()
        self._consume(lx.RPAREN)
        return inner

    def _literal(self, kind: int) -> Node:
        image = self._consume(kind).image
        if kind == lx.STRING:
            return Constant(_string_value(image))
        if kind == lx.DECIMAL:
            return _decimal(image)
        if kind == lx.FLOAT:
            return _float(image)
        return BooleanConstant({lx.TRUE: True, lx.FALSE: False, lx.NULL: None}[kind])


class _Recognizer:
    """Java's syntactic look-ahead for ``'+' unary``: does a unary expression start at a token
    index? Pure grammar, no checks; loops stop (backtracking) at the first incomplete turn."""

    def __init__(self, lexer: lx.Lexer):
        self._lexer = lexer
        self._depth = 0

    def _kind(self, at: int) -> int:
        return self._lexer.token(at).kind

    def unary(self, at: int) -> int | None:
        self._depth += 1
        try:
            if self._depth > NESTING_MAX:
                raise JavaError("java.lang.StackOverflowError")
            kind = self._kind(at)
            if kind in (lx.PLUS, lx.MINUS, lx.NOT):
                return self.unary(at + 1)
            if kind in _LITERALS or kind == lx.ID:
                return at + 1
            if kind == lx.LPAREN:
                end = self._binary(at + 1, "or")
                if end is not None and self._kind(end) == lx.RPAREN:
                    return end + 1
            return None
        finally:
            self._depth -= 1

    def _binary(self, at: int, level: str) -> int | None:
        inner, operator = {"or": ("and", lx.OR), "and": ("equality", lx.AND)}[level]
        end = self._binary(at, inner) if inner != "equality" else self._equality(at)
        while end is not None and self._kind(end) == operator:
            following = (self._binary(end + 1, inner) if inner != "equality"
                         else self._equality(end + 1))
            if following is None:
                break
            end = following
        return end

    def _equality(self, at: int) -> int | None:
        end = self._comparison(at)
        while end is not None:
            kind = self._kind(end)
            if kind in (lx.EQ, lx.NE):
                following = self._comparison(end + 1)
            elif kind == lx.IS and self._kind(end + 1) == lx.NULL:
                following = end + 2
            elif kind == lx.IS and self._kind(end + 1) == lx.NOT \
                    and self._kind(end + 2) == lx.NULL:
                following = end + 3
            else:
                following = None
            if following is None:
                break
            end = following
        return end

    def _comparison(self, at: int) -> int | None:
        end = self.unary(at)
        while end is not None:
            following = self._comparison_turn(end)
            if following is None:
                break
            end = following
        return end

    def _comparison_turn(self, at: int) -> int | None:
        kind = self._kind(at)
        if kind in _ORDERING:
            return self.unary(at + 1)
        if kind == lx.NOT:
            at += 1
            kind = self._kind(at)
            if kind not in (lx.BETWEEN, lx.IN):
                return None
        if kind == lx.BETWEEN:
            low = self.unary(at + 1)
            if low is None or self._kind(low) != lx.AND:
                return None
            return self.unary(low + 1)
        if kind == lx.IN:
            if self._kind(at + 1) != lx.LPAREN or self._kind(at + 2) != lx.STRING:
                return None
            at += 3
            while self._kind(at) == lx.COMMA and self._kind(at + 1) == lx.STRING:
                at += 2
            return at + 1 if self._kind(at) == lx.RPAREN else None
        return None
