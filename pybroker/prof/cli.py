# `pybroker prof record | report | compare | top`: argument wiring of the profiler.
"""The profiler's command line (docs/profiling.md)."""
import argparse
import signal
import sys
import time

__all__ = ["add_prof_arguments", "run_prof"]


def _attach_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--store", metavar="DIR",
                       help="store directory of a broker running on this machine "
                            "(storePathRootDir)")
    where.add_argument("--admin", metavar="HOST:PORT",
                       help="the broker's listen address (on this machine): its store "
                            "directory and settings come from GET_BROKER_CONFIG")
    parser.add_argument("--chunk-mib", type=int, default=8,
                        help="CommitLog residency strip resolution (MiB per chunk, default 8)")


def add_prof_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``prof`` sub-commands."""
    commands = parser.add_subparsers(title="commands", dest="prof_command", metavar="COMMAND")
    record = commands.add_parser("record", help="sample a running broker every second into "
                                                "a recording (JSON lines)")
    _attach_options(record)
    record.add_argument("-d", "--duration", type=float, default=60.0,
                        help="seconds to record (default 60; Ctrl-C stops earlier)")
    record.add_argument("-i", "--interval", type=float, default=1.0,
                        help="seconds between samples (default 1)")
    record.add_argument("-o", "--output", metavar="FILE",
                        help="recording file (default prof-<time>.jsonl)")
    report = commands.add_parser("report", help="one self-contained HTML page of charts "
                                                "and a reading of a recording")
    report.add_argument("recording")
    report.add_argument("-o", "--output", metavar="FILE", default="report.html")
    compare = commands.add_parser("compare", help="two recordings side by side (HTML page "
                                                  "and a table on stdout)")
    compare.add_argument("first")
    compare.add_argument("second")
    compare.add_argument("--labels", metavar="A,B", help="names of the two (default: the "
                                                         "file names)")
    compare.add_argument("-o", "--output", metavar="FILE", default="compare.html")
    top = commands.add_parser("top", help="a live terminal view refreshed every second")
    _attach_options(top)
    top.add_argument("-i", "--interval", type=float, default=1.0)
    top.add_argument("-n", "--iterations", type=int, default=0,
                     help="stop after N refreshes (default: until Ctrl-C)")


def _target(args: argparse.Namespace):
    from pybroker.prof.sampler import attach_admin, attach_store
    if args.admin:
        return attach_admin(args.admin)
    return attach_store(args.store)


def _record(args: argparse.Namespace) -> int:
    from pybroker.prof.recording import record
    from pybroker.prof.sampler import Sampler
    output = args.output or time.strftime("prof-%Y%m%d-%H%M%S.jsonl")
    sampler = Sampler(_target(args), args.chunk_mib << 20)
    stopped = []
    previous = signal.signal(signal.SIGINT, lambda *_: stopped.append(True))
    try:
        sys.stderr.write(f"pybroker prof: recording {sampler.target.store_root} every "
                         f"{args.interval:g} s for {args.duration:g} s into {output}\n")
        count = record(sampler, output, args.duration, args.interval,
                       stop=lambda: bool(stopped))
    finally:
        signal.signal(signal.SIGINT, previous)
        sampler.close()
    sys.stderr.write(f"pybroker prof: {count} samples in {output}\n")
    return 0 if count else 1


def _report(args: argparse.Namespace) -> int:
    from pybroker.prof.recording import read_recording
    from pybroker.prof.report import report_page, write_page
    write_page(report_page(read_recording(args.recording)), args.output)
    sys.stderr.write(f"pybroker prof: report of {args.recording} in {args.output}\n")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from pybroker.prof.reading import summary
    from pybroker.prof.recording import read_recording
    from pybroker.prof.report import compare_page, write_page
    from pybroker.prof.series import series_of
    first, second = read_recording(args.first), read_recording(args.second)
    labels = tuple(args.labels.split(",", 1)) if args.labels else (first.name, second.name)
    if len(labels) != 2:
        raise ValueError("--labels takes two names: A,B")
    write_page(compare_page(first, second, (labels[0], labels[1])), args.output)
    figures_a, figures_b = summary(series_of(first)), summary(series_of(second))
    width = max(len(name) for name in figures_a | figures_b)
    lines = [f"{'figure':<{width}}  {labels[0]:>14}  {labels[1]:>14}"]
    for name in sorted(figures_a | figures_b):
        cells = [f"{value:14.2f}" if value is not None else f"{'':14}"
                 for value in (figures_a.get(name), figures_b.get(name))]
        lines.append(f"{name:<{width}}  {cells[0]}  {cells[1]}")
    sys.stdout.write("\n".join(lines) + f"\n(page: {args.output})\n")
    return 0


def _top(args: argparse.Namespace) -> int:
    from pybroker.prof.sampler import Sampler
    from pybroker.prof.top import run_top
    sampler = Sampler(_target(args), args.chunk_mib << 20)
    try:
        run_top(sampler, args.interval, args.iterations)
    except KeyboardInterrupt:
        pass
    finally:
        sampler.close()
    return 0


def run_prof(args: argparse.Namespace) -> int:
    """Run the chosen prof command; 1 (with a message) when the broker or file is unusable."""
    runners = {"record": _record, "report": _report, "compare": _compare, "top": _top}
    runner = runners.get(getattr(args, "prof_command", None) or "")
    if runner is None:
        sys.stderr.write("pybroker prof: choose a command (pybroker prof -h)\n")
        return 2
    try:
        return runner(args)
    except (OSError, ValueError) as error:
        sys.stderr.write(f"pybroker prof {args.prof_command}: {error}\n")
        return 1

