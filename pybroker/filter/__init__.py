# SQL92 message selectors as RocketMQ's Java broker evaluates them (enablePropertyFilter).
"""SQL92 filtering: parse a selector once, evaluate it per message.

``compile_selector(text)`` returns a :class:`~pybroker.filter.compiler.CompiledSelector`
(``matches(properties) -> bool``) or raises :class:`~pybroker.filter.parser.SelectorError`
whose ``remark`` is the Java broker's answer to the same selector. Compiled selectors are
cached by text (:func:`cached_selector`), so a subscription is parsed once per process.
"""
from collections import OrderedDict

from pybroker.filter.compiler import CompiledSelector, compile_node
from pybroker.filter.parser import SelectorError, parse

__all__ = ["compile_selector", "cached_selector", "CompiledSelector", "SelectorError",
           "CACHE_ENTRIES_MAX"]

# Selectors kept compiled per process (LRU); each is a few KiB of generated code.
CACHE_ENTRIES_MAX = 1024
_cache: OrderedDict[str, CompiledSelector | SelectorError] = OrderedDict()


def compile_selector(text: str) -> CompiledSelector:
    """Parse and compile ``text``; SelectorError (with Java's remark) when Java refuses it."""
    return compile_node(text, parse(text))


def cached_selector(text: str) -> CompiledSelector:
    """:func:`compile_selector` through a bounded cache (refusals are cached too)."""
    found = _cache.get(text)
    if found is None:
        try:
            found = compile_selector(text)
        except SelectorError as error:
            found = error
        _cache[text] = found
        if len(_cache) > CACHE_ENTRIES_MAX:
            _cache.popitem(last=False)
    else:
        _cache.move_to_end(text)
    if isinstance(found, SelectorError):
        raise found
    return found
