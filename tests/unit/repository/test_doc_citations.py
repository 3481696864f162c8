"""Every section citation in the repository resolves inside it: ``<doc>.md §N[.M]`` names a file
of docs/ that has that numbered section (``protocol.md §8 item N`` an item of §8).

Method: scan the tracked sources, tests, tools, benchmarks and docs for ``§``; each must follow
``<doc>.md`` earlier on its line or at the end of the line before (a list like
``protocol.md §4.6/§4.7`` shares the first name), the doc must exist in docs/, and a heading
``N.`` / ``N.M`` must be in it. A doc's own bare ``§`` citations refer to itself. Citations of
documents outside the repository (the old ``reference §``, ``DESIGN §``, ``STYLE §``,
``broker_design``) are refused. Every ``docs/<page>.md`` and ``tests/<file>.py`` a file names
(the architecture pages are cited by path, ``docs/architecture/send-fast-path.md``) must exist.
"""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
SUFFIXES = (".py", ".pyx", ".pxd", ".pyi", ".h", ".md", ".java", ".go", ".service")
CITATION = re.compile(r"§(\d+(?:\.\d+)*)")
DOC_NAME = re.compile(r"([\w-]+\.md)\b")
# A page of docs/ or a file of tests/ (docs/en and docs/cn are RocketMQ's, cited from its tree).
NAMED_PATH = re.compile(r"(?<![\w/.])((?:docs/(?!en/|cn/)[\w/-]+\.md|tests/[\w/-]+\.py))\b")
OUTSIDE = re.compile(r"\b(?:[Rr]eference §|DESIGN §|STYLE §|DESIGN rule|broker_design|"
                     r"shared/(?:DESIGN|STYLE|reference))")


def tracked_files() -> list[pathlib.Path]:
    listed = subprocess.run(["git", "ls-files", "pybroker", "tests", "tools", "benchmarks",
                             "docs", "README.md"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    return [ROOT / name for name in listed if name.endswith(SUFFIXES)]


def sections(doc: str) -> set[str]:
    """Section numbers of docs/<doc> from its headings (``## 4.`` -> 4, ``### 4.6`` -> 4.6)."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    return {found.group(1) for found in
            re.finditer(r"^#+ (\d+(?:\.\d+)*)\.?\s", text, re.MULTILINE)}


def citations(path: pathlib.Path):
    """(line number, doc, section) of every § citation in ``path``."""
    own_doc = path.name if path.parent == DOCS and path.suffix == ".md" else None
    wrapped = None        # a document named at the very end of the previous line
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for found in CITATION.finditer(line):
            named = DOC_NAME.findall(line[:found.start()])
            doc = named[-1] if named else wrapped or own_doc
            yield number, doc, found.group(1)
        ending = re.search(r"([\w-]+\.md)$", line.rstrip())
        wrapped = ending.group(1) if ending else None


def test_every_citation_resolves():
    problems = []
    known: dict[str, set[str]] = {}
    for path in tracked_files():
        if path == pathlib.Path(__file__):
            continue          # its docstring shows the forms
        relative = path.relative_to(ROOT)
        for number, doc, section in citations(path):
            if doc is None:
                problems.append(f"{relative}:{number}: §{section} names no document")
                continue
            if not (DOCS / doc).is_file():
                problems.append(f"{relative}:{number}: {doc} is not in docs/")
                continue
            if doc not in known:
                known[doc] = sections(doc)
            if section not in known[doc]:
                problems.append(f"{relative}:{number}: {doc} has no section {section}")
    assert not problems, "\n".join(problems)


def test_no_citation_leaves_the_repository():
    problems = [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
                for path in tracked_files()
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if OUTSIDE.search(line) and path != pathlib.Path(__file__)]
    assert not problems, "\n".join(problems)


def test_every_named_page_and_test_file_exists():
    problems = [f"{path.relative_to(ROOT)}:{number}: {found.group(1)} does not exist"
                for path in tracked_files()
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                for found in NAMED_PATH.finditer(line)
                if not (ROOT / found.group(1)).is_file()]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", ["protocol.md", "design.md", "style.md", "real-clients.md",
                                 "security-and-faults.md"])
def test_cited_documents_have_numbered_sections(doc):
    assert sections(doc), doc
