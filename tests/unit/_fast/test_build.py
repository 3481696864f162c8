"""Every Cython source in pybroker/_fast is importable from a compiled extension module.

Method: list the .pyx files, import each module, and check it came from a shared object
(never a pure-Python fallback, never a stale missing build).
"""
import importlib
import pathlib

import pytest

import pybroker._fast

FAST_DIR = pathlib.Path(pybroker._fast.__file__).parent
# frame, send.take: each module's name below pybroker._fast (the send fast path is a package)
PYX_STEMS = sorted(".".join(p.relative_to(FAST_DIR).with_suffix("").parts)
                   for p in FAST_DIR.rglob("*.pyx"))


def test_there_are_fast_modules():
    assert PYX_STEMS, "pybroker/_fast has no .pyx sources"


@pytest.mark.parametrize("stem", PYX_STEMS)
def test_fast_module_is_compiled(stem):
    module = importlib.import_module(f"pybroker._fast.{stem}")
    assert module.__file__.endswith(".so"), module.__file__


@pytest.mark.parametrize("stem", PYX_STEMS)
def test_fast_module_has_interface_files(stem):
    path = FAST_DIR.joinpath(*stem.split("."))
    assert path.with_suffix(".pxd").exists(), f"{stem}.pxd missing (the C-level contract)"
    assert path.with_suffix(".pyi").exists(), f"{stem}.pyi missing (what Python sees)"


def test_every_fast_package_ships_its_sources():
    """A non-editable install carries each _fast package's .pyx/.pxd/.pyi (pyproject's
    package-data names every package folder: its patterns do not reach subfolders); the
    benchmark driver compares them with the checkout (tools/bench_brokers.py)."""
    import tomllib
    root = FAST_DIR.parents[1]
    package_data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]
    folders = {path.parent for path in FAST_DIR.rglob("*.pyx")}
    for folder in folders:
        name = ".".join(folder.relative_to(root).parts)
        patterns = set(package_data.get(name, ()))
        assert {"*.pyx", "*.pxd", "*.pyi"} <= patterns, (name, patterns)
        if any(folder.glob("*.h")):
            assert "*.h" in patterns, (name, patterns)
