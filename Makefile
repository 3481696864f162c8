# Thin wrappers; README quotes these.
PYTHON ?= python3

.PHONY: compile debug test bench clean

compile:
	$(PYTHON) setup.py build_ext --inplace --cython-always --force

debug:
	PYBROKER_DEBUG=1 $(PYTHON) setup.py build_ext --inplace --cython-always --force

test: compile
	$(PYTHON) -m pytest

bench: compile
	$(PYTHON) -m pytest benchmarks/micro --benchmark-only --timeout=0

clean:
	rm -rf build pybroker/_fast/*.c pybroker/_fast/*.so pybroker/_fast/*.html
