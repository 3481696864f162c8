"""Every public name of each compiled pybroker._fast module has a .pyi stub, and no stub names
something the module lacks: mypy checks the Python callers against these faces.

Method: import each compiled module (one per pybroker/_fast/**/*.pyx) and list its public
functions, classes (with their public methods, properties and attributes; the members of
cpdef enums) and constants; parse its .pyi with ast and compare both ways. Names a module
imports from elsewhere (pybroker.errors classes, modules) are not its own and are skipped.
"""
import ast
import enum
import importlib
import pathlib
import types

import pytest

FAST_DIR = pathlib.Path(__file__).resolve().parents[3] / "pybroker" / "_fast"
MODULES = sorted(".".join(path.relative_to(FAST_DIR).with_suffix("").parts)
                 for path in FAST_DIR.rglob("*.pyx"))


def _class_members(node: ast.ClassDef) -> set[str]:
    members = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            members.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            members.add(item.target.id)
        elif isinstance(item, ast.Assign):
            members.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return {name for name in members if not name.startswith("_")}


def stub_names(name: str) -> dict[str, set[str] | None]:
    """{top-level name: its public members (classes) or None} of pybroker/_fast/<name>.pyi."""
    stub = FAST_DIR.joinpath(*name.split(".")).with_suffix(".pyi")
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    names: dict[str, set[str] | None] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, ast.ClassDef):
            names[node.name] = _class_members(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
        elif isinstance(node, ast.Assign):
            names.update((t.id, None) for t in node.targets if isinstance(t, ast.Name))
    return {key: value for key, value in names.items() if not key.startswith("_")}


def runtime_names(name: str) -> dict[str, set[str] | None]:
    """The same table for the compiled module's own public names."""
    module = importlib.import_module(f"pybroker._fast.{name}")
    names: dict[str, set[str] | None] = {}
    for attribute, value in vars(module).items():
        if attribute.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if isinstance(value, type):
            if value.__module__ != module.__name__:
                continue                     # imported, e.g. pybroker.errors classes
            if issubclass(value, enum.Enum):
                names[attribute] = {member.name for member in value}
            else:
                names[attribute] = {member for member in vars(value)
                                    if not member.startswith("_")}
        else:
            names[attribute] = None
    return names


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_has_a_stub(name):
    module_file = importlib.import_module(f"pybroker._fast.{name}").__file__
    assert module_file.endswith(".so"), f"{name} is not compiled: {module_file}"
    runtime, stubs = runtime_names(name), stub_names(name)
    missing = sorted(set(runtime) - set(stubs))
    assert not missing, f"{name}.pyi lacks {missing}"
    for attribute, members in runtime.items():
        if members is not None:
            lacking = sorted(members - (stubs[attribute] or set()))
            assert not lacking, f"{name}.pyi: {attribute} lacks {lacking}"


@pytest.mark.parametrize("name", MODULES)
def test_no_stub_names_what_the_module_lacks(name):
    runtime, stubs = runtime_names(name), stub_names(name)
    stale = sorted(set(stubs) - set(runtime))
    assert not stale, f"{name}.pyi names {stale}, which the module does not have"
    for attribute, members in stubs.items():
        if members is not None and runtime.get(attribute) is not None:
            extra = sorted(members - runtime[attribute])
            assert not extra, f"{name}.pyi: {attribute} names {extra} it does not have"


def test_every_pyx_has_a_stub():
    assert MODULES, "no .pyx found"
    assert [name for name in MODULES
            if not FAST_DIR.joinpath(*name.split(".")).with_suffix(".pyi").exists()] == []
