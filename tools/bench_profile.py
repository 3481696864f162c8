# Profile mode of bench_side_by_side.py: one pybroker scenario under py-spy, flame graphs out.
"""Run pybroker under ``py-spy record --subprocesses`` during one load; write per-process flame
graphs (SVG), the raw collapsed stacks and the heaviest frames to benchmarks/results/profile-*/.

py-spy is installed with pip on first use (PyPI package ``py-spy``); it is not a dependency of
pybroker or of its tests. py-spy launches the broker, so it may sample it without ptrace rights
over unrelated processes; stopping the broker ends py-spy, which then writes its output.
"""
import collections
import html
import json
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import time


import bench_brokers as bb

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE_RATE_HZ = 250
SVG_WIDTH = 1400
ROW_HEIGHT = 16
MIN_FRACTION = 0.002          # frames narrower than this share of samples are not drawn
PROCESS_FRAME = re.compile(r"^process (\d+):")


def ensure_py_spy() -> str:
    """The py-spy executable; pip-installs it into this interpreter's scripts folder if absent."""
    found = shutil.which("py-spy") or shutil.which("py-spy", path=sysconfig.get_path("scripts"))
    if found:
        return found
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "py-spy"], check=True,
                   timeout=300)
    found = shutil.which("py-spy", path=sysconfig.get_path("scripts")) or shutil.which("py-spy")
    if not found:
        raise RuntimeError("py-spy installed but not found on PATH or in the scripts folder")
    return found


def parse_collapsed(text: str) -> dict[str, collections.Counter]:
    """Collapsed stacks ("a;b;c 12") grouped by their leading "process N:..." frame."""
    by_process: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        pid = "all"
        # Forked children appear under their parents' frames: the innermost one is the sampled.
        while frames and PROCESS_FRAME.match(frames[0]):
            pid = PROCESS_FRAME.match(frames.pop(0)).group(1)
        by_process[pid][tuple(frames)] += int(count)
    return by_process


ROLES = (("run_remoting_worker", "remoting"), ("run_appender", "appender"),
         ("run_dispatcher", "dispatcher"), ("run_flusher", "flusher"),
         ("run_namesrv", "namesrv"), ("run_broker", "supervisor"))


def role_of(stacks: collections.Counter) -> str:
    """The pybroker process role whose entry function appears in the stacks."""
    seen = {frame.split(" (", 1)[0] for frames in stacks for frame in frames}
    return next((role for function, role in ROLES if function in seen), "process")


def _short(frame: str) -> str:
    """'func (path/to/pybroker/x.py:12)' -> 'func (pybroker/x.py)': lines merged."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for anchor in ("pybroker/", "asyncio/", "site-packages/"):
        if anchor in path:
            path = path[path.index(anchor):]
            break
    else:
        path = path.rsplit("/", 1)[-1]
    return f"{name} ({path})" if path else name


def heaviest(stacks: collections.Counter, top: int = 12) -> dict:
    """Self (leaf) and inclusive sample shares of the heaviest frames, lines merged."""
    total = sum(stacks.values()) or 1
    leaf, inclusive = collections.Counter(), collections.Counter()
    for frames, count in stacks.items():
        if not frames:
            continue
        leaf[_short(frames[-1])] += count
        for name in {_short(frame) for frame in frames if "pybroker/" in frame}:
            inclusive[name] += count
    return {"samples": total,
            "self": [(name, round(100 * count / total, 1)) for name, count in
                     leaf.most_common(top)],
            "inclusive_pybroker": [(name, round(100 * count / total, 1)) for name, count in
                                   inclusive.most_common(top)]}


def _tree(stacks: collections.Counter) -> dict:
    root: dict = {"count": 0, "children": {}}
    for frames, count in stacks.items():
        node = root
        node["count"] += count
        for frame in frames:
            node = node["children"].setdefault(_short(frame), {"count": 0, "children": {}})
            node["count"] += count
    return root


def flame_svg(stacks: collections.Counter, title: str) -> str:
    """A static flame graph (root at the bottom); hover a box for its name and share."""
    root = _tree(stacks)
    total = root["count"] or 1
    boxes, depth_max = [], [0]

    def walk(node: dict, name: str, x: float, depth: int) -> None:
        width = node["count"] / total * SVG_WIDTH
        if node["count"] / total < MIN_FRACTION:
            return
        depth_max[0] = max(depth_max[0], depth)
        boxes.append((name, x, width, depth, node["count"]))
        child_x = x
        for child_name, child in sorted(node["children"].items()):
            walk(child, child_name, child_x, depth + 1)
            child_x += child["count"] / total * SVG_WIDTH

    walk(root, "all", 0.0, 0)
    height = (depth_max[0] + 3) * ROW_HEIGHT
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{height}" '
             f'font-family="monospace" font-size="11">',
             f'<text x="4" y="13">{html.escape(title)} ({total} samples)</text>']
    for name, x, width, depth, count in boxes:
        y = height - (depth + 1) * ROW_HEIGHT
        hue = 20 + (hash(name) % 40)
        label = html.escape(name[: max(0, int(width / 7))])
        parts.append(f'<g><title>{html.escape(name)} — {100 * count / total:.1f}%</title>'
                     f'<rect x="{x:.1f}" y="{y}" width="{max(width - 0.5, 0.5):.1f}" '
                     f'height="{ROW_HEIGHT - 1}" fill="hsl({hue},85%,60%)"/>'
                     f'<text x="{x + 2:.1f}" y="{y + 12}">{label}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts)


def profile(tools, scenario, work_root: pathlib.Path, measure, timing) -> dict:
    """Run `scenario` once (``measure(tools, broker, scenario, timing, 0)``) against pybroker
    under py-spy; returns the summary it writes."""
    py_spy = ensure_py_spy()
    out_dir = ROOT / "benchmarks" / "results" / f"profile-{time.strftime('%Y%m%dT%H%M%S')}"
    out_dir.mkdir(parents=True, exist_ok=True)
    raw_path = out_dir / "collapsed.txt"
    wrapper = [py_spy, "record", "--subprocesses", "--nonblocking", "--rate",
               str(SAMPLE_RATE_HZ), "--format", "raw", "--output", str(raw_path), "--"]
    broker = bb.PyBroker(work_root / "profile", bb.shared_broker_conf(scenario.flush), wrapper)
    broker.start()
    try:
        record = measure(tools, broker, scenario, timing, 0)
    finally:
        broker.stop()
    deadline = time.monotonic() + 30
    while not raw_path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    summary = {"scenario": scenario.name, "window_messages": record.get("window_messages"),
               "tps": record.get("tps"), "cpu": record.get("cpu"), "error": record.get("error")}
    return render(out_dir, summary)


def render(out_dir: pathlib.Path, summary: dict) -> dict:
    """Flame graphs and summary.json from out_dir/collapsed.txt (also usable after the fact)."""
    raw_path = out_dir / "collapsed.txt"
    by_process = parse_collapsed(raw_path.read_text(encoding="utf-8", errors="replace"))
    summary = dict(summary, output_dir=str(out_dir), processes={})
    for pid, stacks in sorted(by_process.items(), key=lambda item: -sum(item[1].values())):
        label = f"{role_of(stacks)}-{pid}"
        (out_dir / f"flame-{label}.svg").write_text(flame_svg(stacks, label), encoding="utf-8")
        summary["processes"][label] = heaviest(stacks)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary


if __name__ == "__main__":
    # Re-render an earlier profile: python tools/bench_profile.py benchmarks/results/profile-X
    folder = pathlib.Path(sys.argv[1])
    previous = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    for stale in folder.glob("flame-*.svg"):
        stale.unlink()
    render(folder, {key: previous.get(key) for key in
                    ("scenario", "window_messages", "tps", "cpu")})
