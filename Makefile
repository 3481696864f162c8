# Thin wrappers; README and tests/README.md quote these.
PYTHON ?= python3

.PHONY: build compile debug quick test test-debug bench clean

# Incremental: only the extensions whose .pyx, .pxd or .h changed are compiled again
# (a change of flavour, debug <-> normal, rebuilds all; setup.py).
build:
	$(PYTHON) setup.py build_ext --inplace -j 2

# From scratch, as CI builds.
compile:
	$(PYTHON) setup.py build_ext --inplace -j 2 --cython-always --force

debug:
	PYBROKER_DEBUG=1 $(PYTHON) setup.py build_ext --inplace -j 2

# The inner loop: build, then every `unit` test (no process of its own; ruff, mypy with its
# cache in build/mypy-cache, tidy included). tests/README.md says what to run next.
quick: build
	$(PYTHON) -m pytest tests/unit -m unit -q --durations=10

test: build
	$(PYTHON) -m pytest

# The unit tests (forking ones included) against the debug build, whose PYBROKER_DEBUG checks
# (_fast/debug.pxd) abort on a broken invariant; then the normal build again, also when a test
# failed. CI runs the `unit` ones on that build in a copy of the tree instead (.ci/debug_unit:
# one debug build, the normal one left in place).
test-debug: debug
	$(PYTHON) -m pytest tests/unit -q --durations=10; status=$$?; \
	$(PYTHON) setup.py build_ext --inplace -j 2 && exit $$status

bench: build
	$(PYTHON) -m pytest benchmarks/micro --benchmark-only --timeout=0

clean:
	rm -rf build pybroker/_fast/*.c pybroker/_fast/*.so pybroker/_fast/*.html \
		pybroker/_fast/*/*.c pybroker/_fast/*/*.so pybroker/_fast/*/*.html
