"""README stays true: its test command is the one .ci/run executes (printing the 30 slowest
tests, on pytest-xdist workers a file at a time), the systemd unit it links runs a valid
command, and tests/README.md maps every test file.

Method: pull the install-and-test line out of README.md and look for it verbatim in .ci/run;
parse the systemd unit README points to and give its command line to the CLI parser; compare
the test files tests/README.md names with the ``test_*.py`` files under tests/.
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_ci_runs_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line for line in readme.splitlines() if "pytest" in line and "pip install" in line]
    assert len(lines) == 1, lines
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert lines[0].strip() in ci
    assert "--durations=30" in lines[0]
    # In parallel, whole files per worker (tests/parallel.py; tests/README.md says why).
    assert re.search(r" -n \d+ --dist loadfile\b", lines[0]), lines[0]


def test_systemd_unit_runs_a_valid_pybroker_command():
    """docs/pybroker.service (README links it) starts a subcommand with arguments the CLI
    accepts, and stops it with SIGTERM (a clean stop)."""
    from pybroker.cli import build_parser
    unit = (ROOT / "docs" / "pybroker.service").read_text(encoding="utf-8")
    settings = dict(line.split("=", 1) for line in unit.splitlines()
                    if "=" in line and not line.startswith("#"))
    program, *arguments = settings["ExecStart"].split()
    assert program.endswith("/bin/pybroker")
    parsed = build_parser().parse_args(arguments)
    assert parsed.subcommand == "standalone" and parsed.config_file
    assert settings["KillSignal"] == "SIGTERM"
    assert "docs/pybroker.service" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_tests_readme_maps_every_test_file():
    tests = ROOT / "tests"
    named = set(re.findall(r"`(?:tests/)?((?:[\w-]+/)+test_\w+\.py)`",
                           (tests / "README.md").read_text(encoding="utf-8")))
    present = {str(path.relative_to(tests)) for path in tests.rglob("test_*.py")}
    assert not named - present, f"tests/README.md names missing files: {sorted(named - present)}"
    assert not present - named, (f"add each test file to the feature it tests in tests/README.md: "
                                 f"{sorted(present - named)}")
