# Instructions per pull of the in-process pull round (benchmarks/micro/pull_harness.py), callgrind.
"""Count the CPU instructions one pull costs a remoting worker, with valgrind's callgrind.

Wall-clock figures on the shared 2-core box are noise; instruction counts are not. This runs
the pull round of ``benchmarks/micro/pull_harness.py`` (4 PULL_MESSAGE frames of Apache's
benchmark Consumer per read, 32 records of 128 B each; ``--path fast`` through the worker's
pull fast path, ``python`` through the handler) under callgrind twice, for ``--low`` and
``--high`` rounds, and prints the difference per pull: the start-up (imports, the store
opening) cancels out. ``--top N`` also prints the N functions whose cost grew most per pull
(self cost, from callgrind_annotate). The kernel's share (system calls) is not counted.

Usage: ``python tools/count_pull_instructions.py [--path fast] [--low 20] [--high 120]
[--top 30]``
(valgrind and callgrind_annotate on the PATH; about 3 minutes).
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
HARNESS_DIR = ROOT / "benchmarks" / "micro"
_RUN = """
import sys
sys.path.insert(0, {harness!r})
import pull_harness
worker = pull_harness.PullWorker({store!r}, {end}, fast={fast})
for _ in range({rounds}):
    worker.round()
worker.close()
"""
_COST_LINE = re.compile(r"\s*([\d,]+) \([^)]*\)\s+(\S.*)")


def _child_env() -> dict[str, str]:
    env = dict(os.environ)  # tidy: allow
    env["PYTHONPATH"] = str(ROOT)
    return env


def _instructions(script: str, out_file: str) -> int:
    completed = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", sys.executable,
         "-c", script], capture_output=True, text=True, env=_child_env(), check=True)
    found = re.search(r"Collected : (\d+)", completed.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no total:\n{completed.stderr[-2000:]}")
    return int(found.group(1))


def _self_costs(out_file: str) -> dict[str, int]:
    listing = subprocess.run(["callgrind_annotate", "--threshold=100", out_file],
                             capture_output=True, text=True, check=True).stdout
    costs: dict[str, int] = {}
    for line in listing.splitlines():
        match = _COST_LINE.match(line)
        if match is None or "PROGRAM TOTALS" in line or match.group(2).startswith("=>"):
            continue
        name = re.sub(r" \[.*\]$", "", re.sub(r"^/tmp/[^:]*/", "", match.group(2)))
        costs[name] = costs.get(name, 0) + int(match.group(1).replace(",", ""))
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--low", type=int, default=20, help="rounds of the first run")
    parser.add_argument("--high", type=int, default=120, help="rounds of the second run")
    parser.add_argument("--top", type=int, default=0, help="functions to list")
    parser.add_argument("--path", choices=("python", "fast"), default="python",
                        help="the handler, or the pull fast path first")
    args = parser.parse_args()
    sys.path.insert(0, str(HARNESS_DIR))
    import pull_harness
    with tempfile.TemporaryDirectory(prefix="pull-count-") as scratch:
        store = os.path.join(scratch, "store")
        end = int(subprocess.run(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HARNESS_DIR)!r}); "
             f"import pull_harness; print(pull_harness.write_store({store!r}))"],
            capture_output=True, text=True, env=_child_env(), check=True).stdout)
        totals, files = [], []
        for rounds in (args.low, args.high):
            out_file = os.path.join(scratch, f"callgrind.{rounds}")
            script = _RUN.format(harness=str(HARNESS_DIR), store=store, end=end, rounds=rounds,
                                 fast=args.path == "fast")
            totals.append(_instructions(script, out_file))
            files.append(out_file)
        pulls = (args.high - args.low) * pull_harness.QUEUES
        per_pull = (totals[1] - totals[0]) / pulls
        sys.stdout.write(f"instructions per pull: {per_pull:,.0f} (per message "
                         f"{per_pull / pull_harness.BATCH:,.0f}); totals {totals[0]:,} for "
                         f"{args.low} rounds, {totals[1]:,} for {args.high}\n")
        if args.top:
            low, high = _self_costs(files[0]), _self_costs(files[1])
            grown = sorted(((high.get(name, 0) - low.get(name, 0)) / pulls, name)
                           for name in set(low) | set(high))
            for cost, name in reversed(grown[-args.top:]):
                sys.stdout.write(f"{cost:12,.0f}  {name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
