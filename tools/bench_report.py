# Aggregation of side-by-side benchmark records into result JSON, docs/benchmarks.md, comparisons.
"""Medians, spreads and pybroker/Java ratios of bench_side_by_side.py records; the doc page; the
change between two result files (``--quick`` regression check)."""
import json
import os
import pathlib
import platform
import statistics
import subprocess
import time

import psutil

# (key, label, decimals); values come from _value().
METRICS = (
    ("tps", "TPS", 0), ("p99_rt_ms", "p99 RT ms", 1), ("avg_rt_ms", "avg RT ms", 2),
    ("cpu_us_per_msg", "broker CPU µs/msg", 1), ("ctx_per_msg", "ctx switches/msg", 2),
    ("pss_peak_mib", "PSS MiB", 0), ("machine_busy", "box busy", 2),
    ("load_cpu_us_per_msg", "load CPU µs/msg", 1), ("load_before", "load avg before", 1),
)
# Shown only where a scenario has them (the timer scenario: tools/bench_timer.py).
TIMER_METRICS = (("put_tps", "timer put TPS", 0), ("lateness_avg_ms", "timer lateness ms", 0))
# Ratios pybroker / Java: (key, label, goal as (comparison, bound) or None). The goals are
# issue #28's: TPS >= 1.5 in every send and consume scenario (batch: BATCH_TPS_GOAL), p99 <= 0.7,
# CPU per message <= 0.5, PSS <= 0.25.
RATIOS = (("tps", "TPS", (">=", 1.5)), ("p99_rt_ms", "p99 RT", ("<=", 0.7)),
          ("cpu_us_per_msg", "CPU/msg", ("<=", 0.5)), ("pss_peak_mib", "PSS", ("<=", 0.25)))
BATCH_TPS_GOAL = 2.0
FLOOR = "floor"      # the broker kind of tools/remoting_floor.py
PYBROKER_ROLES = ("supervisor", "namesrv", "remoting-0", "remoting-1", "appender",
                  "dispatcher", "flusher")


def _value(record: dict, key: str):
    if "error" in record:
        return None
    cpu = record.get("cpu") or {}
    if key in ("cpu_us_per_msg", "ctx_per_msg", "machine_busy"):
        return cpu.get(key)
    if key.startswith("role:"):
        return ((cpu.get("processes") or {}).get(key[5:]) or {}).get("cpu_us_per_msg")
    if key == "load_before":            # the 1-minute load average before the broker started
        return (record.get(key) or [None])[0]
    return record.get(key)


def _stats(values: list) -> dict | None:
    values = [value for value in values if value is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values)}


def _goal_met(ratio: float, goal, key: str, scenario: str) -> bool | None:
    if goal is None:
        return None
    comparison, bound = goal
    if key == "tps" and scenario.startswith("batch"):
        bound = BATCH_TPS_GOAL
    return ratio >= bound if comparison == ">=" else ratio <= bound


def aggregate(records: list[dict]) -> list[dict]:
    """Per scenario: per broker median/min/max of every metric and per role; pybroker/Java
    ratios of medians against every Java broker present, with the goal met or not, and
    pybroker / floor where the floor ran (no goal)."""
    rows = []
    for scenario in dict.fromkeys(record["scenario"] for record in records):
        mine = [r for r in records if r["scenario"] == scenario]
        row = {"scenario": scenario, "brokers": {}, "ratios": {}}
        for broker in dict.fromkeys(r["broker"] for r in mine):
            runs = [r for r in mine if r["broker"] == broker]
            roles = sorted({role for r in runs for role in
                            ((r.get("cpu") or {}).get("processes") or {})})
            stats = {key: _stats([_value(r, key) for r in runs])
                     for key, _, _ in METRICS + TIMER_METRICS}
            stats["roles"] = {role: _stats([_value(r, "role:" + role) for r in runs])
                              for role in roles}
            stats["errors"] = sum("error" in r for r in runs)
            stats["failures"] = sum((r.get("send_failed") or 0) + (r.get("response_failed") or 0)
                                    + (r.get("failed") or 0) for r in runs)
            row["brokers"][broker] = stats
        ours = row["brokers"].get("pybroker")
        for broker, theirs in row["brokers"].items():
            if broker == "pybroker" or ours is None:
                continue
            ratios = {}
            for key, _, goal in RATIOS:
                if ours.get(key) and theirs.get(key) and theirs[key]["median"]:
                    ratio = round(ours[key]["median"] / theirs[key]["median"], 3)
                    # The goals are against Java; pybroker / floor is the share of the box's
                    # ceiling it reaches (tools/remoting_floor.py), no goal.
                    ratios[key] = {"ratio": ratio, "goal_met": None if broker == FLOOR else
                                   _goal_met(ratio, goal, key, scenario)}
            row["ratios"][broker] = ratios
        rows.append(row)
    return rows


def _command_output(argv: list[str]) -> str:
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    return (run.stdout + run.stderr).strip().splitlines()[0] if (run.stdout + run.stderr) \
        else "unavailable"


def machine() -> dict:
    """What the figures were measured on."""
    model = "unknown"
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model, "logical_cpus": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "java": _command_output(["java", "-version"]),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}


def commit_id() -> str | None:
    """The full id of the checkout's HEAD (None outside a git checkout)."""
    try:
        run = subprocess.run(["git", "-C", str(pathlib.Path(__file__).resolve().parents[1]),
                              "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return run.stdout.strip() or None


def build_result(args, records: list[dict], scenarios, started: float, revision: str,
                 context: dict | None = None, stopped: str | None = None) -> dict:
    """The result file's content; ``stopped`` (the reason) marks it partial."""
    context = context or {}
    mode = args.mode + (f" (only {args.only})" if args.only else "")
    load = context.get("load") or {}
    return {
        "mode": mode, "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "duration_s": round(time.time() - started, 1), "runs": args.runs,
        "revision": revision, "commit": commit_id(), "tag": args.tag, "brokers": args.brokers,
        "partial": bool(stopped), "stopped": stopped,
        "load_tool": "apache" if load.get("kind") == "apache" else "java_bench", "load": load,
        "broker_versions": context.get("broker_versions") or {},
        "settings": dict(getattr(args, "set", None) or ()),
        "run_seconds": args.duration, "warmup_seconds": args.warmup, "machine": machine(),
        "planned_minutes": getattr(args, "planned_min", None),   # --full's plan, vs duration_s
        "scenarios": [{"name": s.name, "kind": s.kind, "body_bytes": s.body_bytes,
                       "threads": s.threads, "batch": s.batch, "flush": s.flush}
                      for s in scenarios],
        "summary": aggregate(records), "records": records,
    }


def _cell(stats: dict | None, digits: int = 0) -> str:
    if not stats:
        return "–"
    fmt = f"{{:.{digits}f}}"
    if stats["n"] == 1:
        return fmt.format(stats["median"])
    return f"{fmt.format(stats['median'])} ({fmt.format(stats['min'])}–" \
           f"{fmt.format(stats['max'])})"


def _ratio_cell(ratios: dict, key: str) -> str:
    entry = ratios.get(key)
    if not entry:
        return "–"
    mark = {True: " ✓", False: " ✗", None: ""}[entry["goal_met"]]
    return f"{entry['ratio']:.2f}{mark}"


def table(result: dict) -> str:
    """Markdown tables: figures per scenario and broker, ratios, pybroker per process."""
    metrics = METRICS + tuple(metric for metric in TIMER_METRICS if any(
        stats.get(metric[0]) for row in result["summary"] for stats in row["brokers"].values()))
    labels = [label for _, label, _ in metrics]
    lines = ["| scenario | broker | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for row in result["summary"]:
        for broker, stats in row["brokers"].items():
            errors = f" ({stats['errors']} failed runs)" if stats["errors"] else ""
            lines.append(f"| {row['scenario']} | {broker}{errors} | " + " | ".join(
                _cell(stats.get(key), digits) for key, _, digits in metrics) + " |")
    lines += ["", "| scenario | pybroker / | " + " | ".join(label for _, label, _ in RATIOS) + " |",
              "|---|---|" + "---|" * len(RATIOS)]
    for row in result["summary"]:
        for broker, ratios in row["ratios"].items():
            lines.append(f"| {row['scenario']} | {broker} | " + " | ".join(
                _ratio_cell(ratios, key) for key, _, _ in RATIOS) + " |")
    lines += ["", "CPU µs per message per process (median; pybroker):", "",
              "| scenario | " + " | ".join(PYBROKER_ROLES) + " | load |",
              "|---|" + "---|" * (len(PYBROKER_ROLES) + 1)]
    for row in result["summary"]:
        stats = row["brokers"].get("pybroker")
        if stats:
            roles = stats["roles"]
            lines.append(f"| {row['scenario']} | " + " | ".join(
                _cell(roles.get(role), 1) for role in PYBROKER_ROLES) + " | "
                + _cell(stats.get("load_cpu_us_per_msg"), 1) + " |")
    return "\n".join(lines)


def brokers_text(versions: dict) -> str:
    """The brokers and what runs as each: pybroker's version and package, the Java jars."""
    parts = []
    for name, info in versions.items():
        if name == "pybroker":
            parts.append(f"pybroker {info['version']} ({info['package']}"
                         + ("" if info["matches_checkout"] else
                            ", NOT this checkout's sources") + ")")
        else:
            jars = ", ".join(f"{module} {version}" for module, version in info.items()
                             if version)
            parts.append(f"{name} ({jars})")
    return "; ".join(parts)


def header_lines(result: dict) -> list[str]:
    """What a shared table must say: load, brokers, box, commit, and whether it is partial."""
    box = result["machine"]
    before = [r["load_before"][0] for r in result.get("records", []) if r.get("load_before")]
    spread = f"{min(before):.1f}–{max(before):.1f}" if before else "–"
    lines = [f"load: {(result.get('load') or {}).get('text', result.get('load_tool'))}",
             f"brokers: {brokers_text(result.get('broker_versions') or {}) or 'unknown'}",
             f"box: {box['logical_cpus']} cores ({box['cpu_model']}), {box['memory_gib']} GiB; "
             f"1-minute load average before each run {spread}",
             f"commit: {result.get('revision')} ({result.get('commit') or 'no git checkout'})"]
    if result.get("partial"):
        lines.insert(0, f"PARTIAL: stopped early: {result.get('stopped')}")
    return lines


def summary_text(result: dict) -> str:
    return "\n".join([f"mode {result['mode']} at {result.get('revision')}, "
                      f"{result['duration_s']} s", *header_lines(result), "", table(result)])


def load_key(result: dict) -> str:
    """Which load a result ran: "project", or "apache <tag>" (older files: load_tool)."""
    load = result.get("load") or {}
    if load.get("kind") == "apache" or result.get("load_tool") == "apache":
        return f"apache {load.get('tag') or 'unknown tag'}"
    return "project"


def _comparable(result: dict) -> tuple:
    """What two results must share for their figures to be compared: load, run and warm-up
    seconds, the box's CPU model and count."""
    box = result.get("machine") or {}
    return (load_key(result), result.get("run_seconds"), result.get("warmup_seconds"),
            box.get("cpu_model"), box.get("logical_cpus"))


def previous_result(results_dir: pathlib.Path, mode: str, exclude: pathlib.Path,
                    like: dict | None = None) -> dict | None:
    """The newest complete result of ``mode`` in results_dir, other than ``exclude``, that is
    comparable with ``like`` (same load, durations and box: :func:`_comparable`)."""
    want = _comparable(like) if like is not None else None
    found = None
    for path in sorted(results_dir.glob("*.json")):
        if path == exclude:
            continue
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if result.get("mode") == mode and result.get("summary") and "revision" in result \
                and not result.get("partial") and (want is None or _comparable(result) == want):
            found = result
    return found


def _median(row: dict, broker: str, key: str):
    stats = (row["brokers"].get(broker) or {}).get(key)
    return stats["median"] if stats else None


def compare_text(previous: dict, current: dict) -> str:
    """pybroker's figures and ratios now vs the previous result, scenario by scenario."""
    lines = [f"Change since {previous.get('revision')} ({previous['started']}) -> "
             f"{current.get('revision')}:", "",
             "| scenario | figure | before | now | change |", "|---|---|---|---|---|"]
    before_rows = {row["scenario"]: row for row in previous["summary"]}
    for row in current["summary"]:
        old = before_rows.get(row["scenario"])
        if old is None:
            continue
        pairs = [(f"pybroker {label}", _median(old, "pybroker", key),
                  _median(row, "pybroker", key)) for key, label, _ in METRICS[:5]]
        for broker, ratios in row["ratios"].items():
            for key, label, _ in RATIOS:
                before = ((old["ratios"].get(broker) or {}).get(key) or {}).get("ratio")
                now = (ratios.get(key) or {}).get("ratio")
                pairs.append((f"{label} ratio vs {broker}", before, now))
        for role in PYBROKER_ROLES:
            pairs.append((f"{role} µs/msg",
                          ((old["brokers"].get("pybroker") or {}).get("roles", {}).get(role)
                           or {}).get("median"),
                          ((row["brokers"].get("pybroker") or {}).get("roles", {}).get(role)
                           or {}).get("median")))
        for label, before, now in pairs:
            if before is None or now is None:
                continue
            change = f"{(now - before) / before * 100:+.0f} %" if before else "–"
            lines.append(f"| {row['scenario']} | {label} | {before:.2f} | {now:.2f} | "
                         f"{change} |")
    return "\n".join(lines)


NOTES_MARKER = "<!-- Hand-written notes below this line are kept when the page is regenerated. -->"
INTRO = """# End-to-end benchmarks: pybroker next to Java RocketMQ

Generated by `tools/bench_side_by_side.py` (see `benchmarks/e2e/README.md`); raw figures are in
`benchmarks/results/*.json`. Do not edit above the marker at the end: the page is rewritten from
the newest result file of each mode.

**Method.** RocketMQ's benchmark defaults: 64 sender threads (also 8 and 32), 128 B and 1 KiB
bodies, a batch producer (64 threads x 16 messages), a push consumer with 20 threads draining a
backlog of 1,000,000 messages. Every run lasts 60 s (quick: 30 s) and its first 10 s are
discarded: the load program opens a measured window after the warm-up, and the broker's
processes are sampled at the window's two edges. Each (run, scenario, broker) starts a fresh
broker on an empty store with the same broker.conf (RocketMQ defaults except 128 MiB CommitLog
files, `flushDiskType` per scenario; pybroker `remotingWorkers=2`); brokers take turns within a
run. Cells are `median (min–max)` over the runs.

**Load tool.** `tools/java_bench/BenchProducer` and `BenchConsumer` on the official 4.9.8 client
jars, against every broker: Apache's `rocketmq-example` (Producer, BatchProducer, Consumer) is
not on Maven Central. The notes below compare them with Apache's classes built from source.

**Figures.** TPS = messages acknowledged (consumed) in the window / window seconds. RT per
request, client side (consume: store-to-consume). Broker CPU µs/msg = user+system CPU of every
broker process in the window / messages in the window (pybroker: supervisor, embedded
NameServer, remoting workers, appender, dispatcher, flusher; Java: NameServer and broker JVMs);
ctx switches/msg likewise (voluntary + involuntary, every thread). PSS = the peak over the run
of the summed proportional set size of the broker's processes (shared pages divided among the
processes mapping them: the memory the broker really holds). Box busy = share of both vCPUs
busy in the window (load generator included); load CPU = the load program's µs per message.
Ratios are pybroker median / Java median; ✓/✗ mark the goals of issue #28 (TPS ≥ 1.5, async
and SYNC_FLUSH alike, 2.0 for batch; p99 ≤ 0.7; CPU/msg ≤ 0.5; PSS ≤ 0.25). A `floor` column, where
one ran, is `tools/remoting_floor.py`: a C server that answers every send at once and stores
nothing (with pybroker's NameServer), the load program's ceiling on this box; pybroker / floor
is the share of that ceiling pybroker reaches, with no goal.

**Noise.** A 2-vCPU virtual machine shared with other engineers' work; the load generator runs
on the same two cores as the broker. CPU µs per message per process is the figure least hurt
by noise; TPS moves by tens of percent between sessions.
"""


def _brokers_shown(result: dict) -> str:
    """The brokers of a run that was not side by side (" (pybroker only)"), else ""."""
    brokers = result.get("brokers") or []
    shown = f" ({', '.join(brokers)} only)" if len(brokers) == 1 else ""
    load = load_key(result)
    return shown + (f" (Apache's classes, {load.split(' ', 1)[1]})" if load != "project"
                    else "")


def _section(result: dict) -> str:
    machine_info = result["machine"]
    return "\n".join([
        f"## {result['mode']}{_brokers_shown(result)} — {result['started']} at "
        f"{result.get('revision', '?')} "
        f"({result['duration_s']} s, {result['runs']} run(s) of "
        f"{result.get('run_seconds', '?')} s, {result.get('warmup_seconds', '?')} s warm-up, "
        f"load tool {result.get('load_tool', 'java_bench')})", "",
        f"Machine: {machine_info['cpu_model']}, {machine_info['logical_cpus']} logical CPUs, "
        f"{machine_info['memory_gib']} GiB, Linux {machine_info['kernel']}, Python "
        f"{machine_info['python']}, {machine_info['java']}; load average at the end "
        f"{machine_info['load_average_at_end']}." + (f" {result['tag']}" if result.get("tag")
                                                     else ""), "",
        *[line + "  " for line in header_lines(result)[:2] if result.get("load")], "",
        table(result), ""])


def _renders(result: dict) -> bool:
    """A result file this version's table can show (older files summarised differently)."""
    summary = result.get("summary")
    return bool(result.get("mode")) and isinstance(summary, list) and bool(summary) and \
        all(isinstance(row, dict) and "ratios" in row for row in summary) and \
        not result.get("partial")


def _heading_key(section: str) -> str:
    """The part of a generated section's heading that names what ran ("quick", "ha (pybroker
    only)"), without the date and revision."""
    return section.split("\n", 1)[0].removeprefix("## ").split(" — ", 1)[0]


def write_docs(results_dir: pathlib.Path, doc_path: pathlib.Path) -> None:
    """Rewrite doc_path's generated part from the newest result file of each mode and set of
    brokers (a pybroker-only A/B run does not replace the side-by-side section). A section
    no result file here can regenerate (its file is gone or older than this table) is kept as
    it was; the notes below NOTES_MARKER are kept."""
    newest: dict[tuple, dict] = {}
    for path in sorted(results_dir.glob("*.json")):
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if _renders(result):
            newest[(result["mode"], tuple(result.get("brokers") or ()), load_key(result))] = \
                result
    notes, kept = "", {}
    if doc_path.exists():
        text = doc_path.read_text(encoding="utf-8")
        generated, _, notes = text.partition(NOTES_MARKER)
        for section in generated.split("\n## ")[1:]:
            kept[_heading_key(section)] = "## " + section.rstrip("\n") + "\n"
    sections = {}
    for result in newest.values():
        section = _section(result)
        sections[_heading_key(section)] = section
    for key, section in kept.items():
        sections.setdefault(key, section)
    order = sorted(sections, key=lambda key: ({"full": 0, "quick": 1}.get(key.split(" ")[0], 2),
                                              key))
    doc_path.write_text(INTRO + "\n" + "\n".join(sections[key] for key in order) + "\n"
                        + NOTES_MARKER + (notes or "\n"), encoding="utf-8")
