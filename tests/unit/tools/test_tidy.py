"""Goal: tools/tidy.py's twin rule finds a module-level function of pybroker/ that repeats
another's body (the docstring and name aside), and only that. Method: small trees of real
files in a temp directory run through tidy's main(), output captured."""
import pathlib
import sys

TOOLS = pathlib.Path(__file__).resolve().parents[3] / "tools"
sys.path.insert(0, str(TOOLS))

import tidy  # noqa: E402

BODY = '''
    try:
        return int(address[0]) << 16 | int(address[1])
    except (ValueError, IndexError):
        return 1
'''


def _tree(tmp_path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (tmp_path / "setup.py").write_text("", encoding="utf-8")
    return tmp_path


def _run(root: pathlib.Path, capsys) -> tuple[int, str]:
    status = tidy.main(["tidy", str(root)])
    return status, capsys.readouterr().out


def test_a_twin_function_is_reported_with_its_original(tmp_path, capsys):
    root = _tree(tmp_path, {
        "pybroker/store/block.py": 'def peer_word(address) -> int:\n    """Doc."""' + BODY,
        "pybroker/proc/master.py": "def _peer_word(address) -> int:" + BODY})
    status, out = _run(root, capsys)
    assert status == 1
    assert out == ("pybroker/store/block.py:1: function peer_word is a twin of "
                   "pybroker/proc/master.py:1 _peer_word -> keep one and import it\n")


def test_different_bodies_methods_short_ones_and_allowed_ones_are_not_twins(tmp_path, capsys):
    other = BODY.replace("<< 16", "<< 8")
    root = _tree(tmp_path, {
        "pybroker/a.py": "def first(address) -> int:" + BODY,
        "pybroker/b.py": "def second(address) -> int:" + other,
        "pybroker/c.py": "class C:\n    def first(self, address) -> int:" +
                         BODY.replace("\n    ", "\n        "),
        "pybroker/d.py": "def short(x):\n    return x\n\n\ndef also_short(x):\n    return x\n",
        "pybroker/e.py": "def kept(address) -> int:  # tidy: allow (reason)" + BODY,
        "tools/f.py": "def first(address) -> int:" + BODY})
    assert _run(root, capsys) == (0, "")
