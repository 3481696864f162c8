"""README's test command is the one .ci/run executes, so the documented command stays true.

Method: pull the install-and-test line out of README.md and look for it verbatim in .ci/run.
"""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_ci_runs_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line for line in readme.splitlines() if "pytest" in line and "pip install" in line]
    assert len(lines) == 1, lines
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert lines[0].strip() in ci
