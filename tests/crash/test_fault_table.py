"""tools/fault_table.py still runs end to end and prints the table docs/reliability.md quotes.

Method: run the tool as an operator would (`python tools/fault_table.py --runs 1 --only ...`)
for two cheap faults - kill -9 of the appender, and the internal links cut - each against a
real broker under load; the Markdown table it prints must have one row per fault with more
than the 300 acknowledged sends taken before the fault, none lost, and a recovery time inside
the tool's own deadline.
"""
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.timeout(300)]

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "fault_table.py")
FAULTS = ["kill -9 of the appender", "internal links cut (shutdown of the sockets)"]


def test_the_tool_prints_a_row_per_fault_with_nothing_lost():
    result = subprocess.run([sys.executable, TOOL, "--runs", "1", "--only", *FAULTS],
                            capture_output=True, text=True, timeout=280, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("| fault | runs | acknowledged | acknowledged lost |"), lines
    rows = {cells[0]: cells[1:] for line in lines[2:]
            if (cells := [cell.strip() for cell in line.strip("|").split("|")])}
    assert sorted(rows) == sorted(FAULTS), lines
    for name, (runs, acknowledged, lost, recovery) in rows.items():
        assert (runs, lost) == ("1", "0"), (name, lines)
        assert int(acknowledged) > 300, (name, lines)     # the fault comes after 300
        assert 0 <= float(recovery.split()[0]) < 60, (name, lines)
