# Tokens of RocketMQ's SQL92 selectors, lexed lazily as the Java broker's parser lexes them.
"""The selector lexer: token kinds, images, positions and lexical errors as Java reports them.

Token rules (RocketMQ's JMS-style selector grammar): whitespace `` \\t\\n\\r\\f``; ``--``
comments up to and including a line end; ``/* */`` comments; keywords NOT AND OR BETWEEN IN
TRUE FALSE NULL IS in any case; decimal integers (``0`` or ``[1-9][0-9]*`` with an optional
``l``/``L``); floats (``1.``, ``1.5``, ``.5``, ``1e5``, each with an optional exponent); strings
in single quotes with ``''`` for a quote; identifiers ``[a-zA-Z_$][a-zA-Z0-9_$]*``; the
operators ``= <> > >= < <= ( , ) + -``. The longest match wins, then the earlier kind.

Java's parser lexes only as far as it looks, so a lexical error after a complete expression
is reported only if the parser peeks at it: :class:`Lexer` is lazy for that reason. Positions
are Java's: 1-based lines and columns over UTF-16 code units, a tab advancing the column to the
next multiple of 8. A lexical error is :class:`~pybroker.filter.java_lang.JavaError` with
class ``org.apache.rocketmq.filter.parser.TokenMgrError`` and JavaCC's message.
"""
from pybroker.filter.java_lang import JavaError, add_escapes, java_chars

__all__ = ["Token", "Lexer", "EOF", "NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE",
           "NULL", "IS", "DECIMAL", "FLOAT", "STRING", "ID", "EQ", "NE", "GT", "GE", "LT",
           "LE", "LPAREN", "COMMA", "RPAREN", "PLUS", "MINUS", "TOKEN_IMAGES"]

TOKEN_MGR_ERROR = "org.apache.rocketmq.filter.parser.TokenMgrError"

# Token kinds: the numbers of the Java parser's constants (its error messages list kinds in
# this order).
EOF, NOT, AND, OR, BETWEEN, IN, TRUE, FALSE, NULL, IS = 0, 8, 9, 10, 11, 12, 13, 14, 15, 16
DECIMAL, FLOAT, STRING, ID = 17, 18, 20, 21
EQ, NE, GT, GE, LT, LE, LPAREN, COMMA, RPAREN, PLUS, MINUS = range(22, 33)

TOKEN_IMAGES = {
    EOF: "<EOF>", NOT: '"NOT"', AND: '"AND"', OR: '"OR"', BETWEEN: '"BETWEEN"', IN: '"IN"',
    TRUE: '"TRUE"', FALSE: '"FALSE"', NULL: '"NULL"', IS: '"IS"',
    DECIMAL: "<DECIMAL_LITERAL>", FLOAT: "<FLOATING_POINT_LITERAL>", STRING: "<STRING_LITERAL>",
    ID: "<ID>", EQ: '"="', NE: '"<>"', GT: '">"', GE: '">="', LT: '"<"', LE: '"<="',
    LPAREN: '"("', COMMA: '","', RPAREN: '")"', PLUS: '"+"', MINUS: '"-"',
}
_KEYWORDS = {"NOT": NOT, "AND": AND, "OR": OR, "BETWEEN": BETWEEN, "IN": IN, "TRUE": TRUE,
             "FALSE": FALSE, "NULL": NULL, "IS": IS}
_ONE_CHAR = {"=": EQ, ">": GT, "<": LT, "(": LPAREN, ",": COMMA, ")": RPAREN, "+": PLUS,
             "-": MINUS}
_WHITESPACE = frozenset(" \t\n\r\f")
_ID_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_ID_PART = _ID_START | frozenset("0123456789")
_DIGITS = frozenset("0123456789")
TAB_SIZE = 8


class Token:
    """One token: ``kind``, ``image`` (its text, Java chars) and 1-based ``line``/``column``."""
    __slots__ = ("kind", "image", "line", "column")

    def __init__(self, kind: int, image: str, line: int, column: int):
        self.kind = kind
        self.image = image
        self.line = line
        self.column = column

    def __repr__(self) -> str:
        return f"Token({TOKEN_IMAGES[self.kind]}, {self.image!r}, {self.line}:{self.column})"


def _positions(chars: str) -> list[tuple[int, int]]:
    """(line, column) of every char, by JavaCC's SimpleCharStream rules."""
    positions = []
    line, column, after_cr, after_lf = 1, 0, False, False
    for char in chars:
        column += 1
        if after_lf:
            after_lf = False
            line, column = line + 1, 1
        elif after_cr:
            after_cr = False
            if char == "\n":
                after_lf = True
            else:
                line, column = line + 1, 1
        if char == "\r":
            after_cr = True
        elif char == "\n":
            after_lf = True
        elif char == "\t":
            column -= 1
            column += TAB_SIZE - column % TAB_SIZE
        positions.append((line, column))
    return positions


class Lexer:
    """Lazy tokenizer over ``text`` (a Python str; astral characters count as two Java chars).

    :meth:`token` returns the token at an index, lexing up to it on demand.
    """

    def __init__(self, text: str):
        self.chars = java_chars(text)
        self._positions = _positions(self.chars)
        self._tokens: list[Token] = []
        self._at = 0

    def token(self, index: int) -> Token:
        """Token number ``index`` (0-based); EOF repeats at the end. JavaError on a bad char."""
        tokens = self._tokens
        while len(tokens) <= index:
            if tokens and tokens[-1].kind == EOF:
                return tokens[-1]
            tokens.append(self._next())
        return tokens[index]

    def _position(self, index: int) -> tuple[int, int]:
        return self._positions[index]

    def _next(self) -> Token:
        chars, size = self.chars, len(self.chars)
        while True:
            at = self._at
            if at >= size:
                return self._eof()
            char = chars[at]
            if char in _WHITESPACE:
                self._at = at + 1
                continue
            skipped = self._comment_end(at)
            if skipped is None:
                break
            self._at = skipped
        kind, end = self._match(at)
        if kind is None:
            raise self._lexical_error(at, end)
        self._at = end
        line, column = self._positions[at]
        return Token(kind, chars[at:end], line, column)

    def _eof(self) -> Token:
        # Java places EOF at the last char read (line 0, column 0 for an empty selector).
        line, column = self._positions[-1] if self._positions else (0, 0)
        return Token(EOF, "", line, column)

    def _comment_end(self, at: int) -> int | None:
        """End of a complete comment starting at ``at``, else None."""
        chars = self.chars
        if chars.startswith("--", at):
            end = at + 2
            while end < len(chars) and chars[end] not in "\r\n":
                end += 1
            if end == len(chars):
                return None          # no line end: "-" is a token instead
            return end + 2 if chars.startswith("\r\n", end) else end + 1
        if chars.startswith("/*", at):
            end = chars.find("*/", at + 2)
            return None if end < 0 else end + 2
        return None

    def _match(self, at: int) -> tuple[int | None, int]:
        """(kind, end) of the longest token at ``at``; (None, dead index) when none matches."""
        chars = self.chars
        char = chars[at]
        if char in _ID_START:
            end = at + 1
            while end < len(chars) and chars[end] in _ID_PART:
                end += 1
            return _KEYWORDS.get(chars[at:end].upper(), ID), end
        if char in _DIGITS or char == ".":
            return self._number(at)
        if char == "'":
            return self._string(at)
        if char in "<>":
            following = chars[at + 1:at + 2]
            if following == "=":
                return (LE if char == "<" else GE), at + 2
            if char == "<" and following == ">":
                return NE, at + 2
        kind = _ONE_CHAR.get(char)
        if kind is not None:
            return kind, at + 1
        if char == "/" and chars.startswith("/*", at):
            return None, len(chars) - 1          # an unterminated comment runs to the end
        if char == "/":
            return None, min(at + 1, len(chars) - 1)
        return None, at

    def _digits_end(self, at: int) -> int:
        chars = self.chars
        while at < len(chars) and chars[at] in _DIGITS:
            at += 1
        return at

    def _exponent_end(self, at: int) -> int:
        chars = self.chars
        if at < len(chars) and chars[at] in "eE":
            start = at + 1
            if start < len(chars) and chars[start] in "+-":
                start += 1
            end = self._digits_end(start)
            if end > start:
                return end
        return at

    def _number(self, at: int) -> tuple[int | None, int]:
        chars = self.chars
        if chars[at] == ".":
            end = self._digits_end(at + 1)
            if end == at + 1:
                return None, min(at + 1, len(chars) - 1)
            return FLOAT, self._exponent_end(end)
        digits_end = self._digits_end(at)
        if chars[at] == "0":
            decimal_end = at + 1
        else:
            decimal_end = digits_end
            if decimal_end < len(chars) and chars[decimal_end] in "lL":
                decimal_end += 1
        if digits_end < len(chars) and chars[digits_end] == ".":
            float_end = self._exponent_end(self._digits_end(digits_end + 1))
        else:
            float_end = self._exponent_end(digits_end)
            if float_end == digits_end:
                float_end = 0    # digits alone are not a float
        if float_end > decimal_end:
            return FLOAT, float_end
        return DECIMAL, decimal_end

    def _string(self, at: int) -> tuple[int | None, int]:
        """``'...'`` with ``''`` inside: the longest match ends after the last quote that can
        close it (one not followed by another quote that continues the literal)."""
        chars = self.chars
        end = at + 1
        last_close = None
        while True:
            quote = chars.find("'", end)
            if quote < 0:
                break
            last_close = quote + 1       # this quote may close the literal
            if not chars.startswith("''", quote):
                break
            end = quote + 2              # or, doubled, it is a quote inside the literal
        if last_close is None:
            return None, len(chars) - 1
        return STRING, last_close

    def _lexical_error(self, start: int, dead: int) -> JavaError:
        """JavaCC's TokenMgrError for a match that started at ``start`` and stopped at the
        char ``dead`` (the one no token can continue with, or the last char of the input)."""
        chars = self.chars
        line, column = self._positions[dead]
        image_length = dead - start + 1
        if dead == len(chars) - 1:
            after = chars[start:dead + 1] if image_length > 1 else ""
            if chars[dead] in "\r\n":
                line, column = line + 1, 0
            else:
                column += 1
            encountered = "<EOF> "
        else:
            after = chars[start:dead] if image_length > 1 else ""
            encountered = f'"{add_escapes(chars[dead])}" ({ord(chars[dead])}), '
        return JavaError(TOKEN_MGR_ERROR,
                         f"Lexical error at line {line}, column {column}.  Encountered: "
                         f'{encountered}after : "{add_escapes(after)}"')
