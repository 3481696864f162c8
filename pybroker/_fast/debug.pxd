# Checks of our own invariants in the fast paths, compiled in only by the debug build.
#
# setup.py defines PYBROKER_DEBUG=1 when built with PYBROKER_DEBUG=1 (`make debug`, which
# `make test-debug` runs the unit tests on); otherwise PYBROKER_DEBUG is 0 and every check is
# dead code the C compiler removes. Use them as
#
#     if PYBROKER_DEBUG:
#         debug_bounds(at, length, size, "appender: records past the mapped file")
#
# (the `if` keeps the arguments from being evaluated in a normal build). A failed check is a
# bug of ours, not an operating error: it prints what failed with the two values and aborts
# the process, which the supervisor treats as any worker death (style.md 8.9 rule 5; bad
# input from clients and peers is refused by the always-on checks instead).

cdef extern from *:
    """
    #ifndef PYBROKER_DEBUG
    #define PYBROKER_DEBUG 0
    #endif
    #include <stdio.h>
    #include <stdlib.h>

    static void pb_debug_failed(const char *what, long long first, long long second) {
        fprintf(stderr, "pybroker debug check failed: %s (%lld, %lld)\\n", what, first,
                second);
        fflush(stderr);
        abort();
    }

    static inline void pb_debug_check(int holds, const char *what, long long first,
                                      long long second) {
        if (!holds)
            pb_debug_failed(what, first, second);
    }

    /* [at, at + length) lies inside [0, size). */
    static inline void pb_debug_bounds(long long at, long long length, long long size,
                                       const char *what) {
        if (at < 0 || length < 0 || at > size || length > size - at)
            pb_debug_failed(what, at + length, size);
    }
    """
    const bint PYBROKER_DEBUG
    # Aborts with ``what`` and the two values unless ``holds``.
    void debug_check "pb_debug_check"(bint holds, const char *what, long long first,
                                      long long second) noexcept nogil
    # Aborts with ``what`` unless [at, at + length) lies inside [0, size).
    void debug_bounds "pb_debug_bounds"(long long at, long long length, long long size,
                                        const char *what) noexcept nogil
