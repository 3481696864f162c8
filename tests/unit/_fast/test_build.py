"""Every Cython source in pybroker/_fast is importable from a compiled extension module.

Method: list the .pyx files, import each module, and check it came from a shared object
(never a pure-Python fallback, never a stale missing build).
"""
import importlib
import pathlib

import pytest

import pybroker._fast

FAST_DIR = pathlib.Path(pybroker._fast.__file__).parent
PYX_STEMS = sorted(p.stem for p in FAST_DIR.glob("*.pyx"))


def test_there_are_fast_modules():
    assert PYX_STEMS, "pybroker/_fast has no .pyx sources"


@pytest.mark.parametrize("stem", PYX_STEMS)
def test_fast_module_is_compiled(stem):
    module = importlib.import_module(f"pybroker._fast.{stem}")
    assert module.__file__.endswith(".so"), module.__file__


@pytest.mark.parametrize("stem", PYX_STEMS)
def test_fast_module_has_interface_files(stem):
    assert (FAST_DIR / f"{stem}.pxd").exists(), f"{stem}.pxd missing (the C-level contract)"
    assert (FAST_DIR / f"{stem}.pyi").exists(), f"{stem}.pyi missing (what Python sees)"
