# Captures real frames (Java client <-> Java NameServer/broker) and a small Java-written store.
"""Re-create tests/golden/java-<version>/ from a live Java RocketMQ run.

Usage: ``python tools/java_capture/capture_golden.py [--version 4.9.8] [--out DIR]
[--raw-dir DIR]``. Steps: install the pinned jars, start a NameServer and a broker (test profile,
1 MiB CommitLog) on free 127.0.0.1 ports, put one capture proxy in front of each, steer the client
through the broker proxy by rewriting the broker address in the NameServer's answers (the
recorded frames are the originals), run Capture.java's phases (send, binary-send, pull, push),
stop the broker cleanly, then curate a few frames per request code and copy the store.
"""
import argparse
import gzip
import json
import pathlib
import shutil
import struct
import sys
import time

TOOLS_DIR = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOOLS_DIR))

import capture_proxy  # noqa: E402
import java_rocketmq  # noqa: E402

REPO_ROOT = TOOLS_DIR.parent
TOPIC = "CaptureTopic"
PHASES = (  # (phase, Capture.java mode, group, extra args)
    ("send", "send", "capture_producer", ()),
    ("binary_send", "binary-send", "capture_binary_producer", ()),
    ("pull", "pull", "capture_pull_consumer", ()),
    ("push", "push", "capture_push_consumer", ("12", "60")),
)
# (golden file, phase, request code, wanted response code or None for oneway, index among
# matches); broker->client requests are listed in SERVER_REQUESTS.
CURATED = (
    ("get_routeinfo_by_topic_not_exist", "send", 105, 17, 0),
    ("get_routeinfo_by_topic", "pull", 105, 0, 0),
    ("get_routeinfo_by_topic_binary_header", "binary_send", 105, 0, 0),
    ("send_message_v2", "send", 310, 0, 0),
    ("send_message_v2_async", "send", 310, 0, 1),
    ("send_message_v2_oneway", "send", 310, None, 0),
    ("send_batch_message", "send", 320, 0, 0),
    ("send_message_v2_binary_header", "binary_send", 310, 0, 0),
    ("send_batch_message_binary_header", "binary_send", 320, 0, 0),
    ("heart_beat", "push", 34, 0, 0),
    ("get_consumer_list_by_group", "push", 38, 0, 0),
    ("pull_message_found", "pull", 11, 0, 0),
    ("pull_message_push_consumer", "push", 11, 0, 0),
    ("pull_message_subscription_not_latest", "push", 11, 25, 0),
    ("query_consumer_offset", "pull", 14, 0, 0),
    ("query_consumer_offset_not_found", "push", 14, 22, 0),
    ("update_consumer_offset", "pull", 15, 0, 0),
    ("unregister_client", "pull", 35, 0, 0),
    ("register_broker", "boot", 103, 0, 0),
)
SERVER_REQUESTS = (
    ("notify_consumer_ids_changed", "push", 40, None, 0),
)
# The 4.9 broker answers SUCCESS/offset 0 instead of QUERY_NOT_FOUND while a queue still starts
# at offset 0, so this one may legitimately be absent.
OPTIONAL = {"query_consumer_offset_not_found", "pull_message_subscription_not_latest",
            "notify_consumer_ids_changed"}


def _load(path: pathlib.Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _find_exchange(frames, code, response_code, index, request_dir="c2s"):
    """The index-th request with this code (answered with response_code) + its response.

    response_code None selects oneway requests (flag bit 1), which have no response.
    """
    response_dir = "s2c" if request_dir == "c2s" else "c2s"
    matches = []
    for position, frame in enumerate(frames):
        if frame["dir"] != request_dir or frame.get("code") != code or frame.get("flag", 0) & 1:
            continue
        if response_code is None:
            if frame.get("flag", 0) & 2:
                matches.append([frame])
            continue
        response = next((f for f in frames[position + 1:] if f["dir"] == response_dir
                         and f["conn"] == frame["conn"] and f.get("opaque") == frame["opaque"]
                         and f.get("flag", 0) & 1), None)
        if response is not None and response.get("code") == response_code:
            matches.append([frame, response])
    return matches[index] if index < len(matches) else None


def curate(raw_dir: pathlib.Path, out_dir: pathlib.Path) -> dict:
    """Write one <name>.jsonl per CURATED row; returns {name: frame count or 'missing'}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {}
    keep = ("dir", "code", "flag", "opaque", "serialize_type", "header_len", "len", "hex")
    rows = [(row, "c2s") for row in CURATED] + [(row, "s2c") for row in SERVER_REQUESTS]
    for (name, phase, code, response_code, index), request_dir in rows:
        frames = [*_load(raw_dir / f"{phase}.namesrv.jsonl"),
                  *_load(raw_dir / f"{phase}.broker.jsonl")]
        frames.sort(key=lambda frame: frame["t"])
        exchange = _find_exchange(frames, code, response_code, index, request_dir)
        if exchange is None:
            summary[name] = "missing"
            continue
        with open(out_dir / f"{name}.jsonl", "w", encoding="utf-8") as out:
            for frame in exchange:
                out.write(json.dumps({key: frame[key] for key in keep if key in frame},
                                     separators=(",", ":")) + "\n")
        summary[name] = len(exchange)
    return summary


def commitlog_written_bytes(data: bytes) -> int:
    """Length of the CommitLog prefix holding records (walks totalSize until 0 or the end)."""
    position = 0
    while position + 8 <= len(data):
        total_size = struct.unpack_from(">i", data, position)[0]
        if total_size <= 0 or position + total_size > len(data):
            break
        position += total_size
    return position


def copy_store(store_dir: pathlib.Path, out_dir: pathlib.Path) -> dict:
    """Copy a stopped broker's store: CommitLog truncated, index gzipped, the rest as is."""
    shutil.rmtree(out_dir, ignore_errors=True)
    notes = {}
    for source in sorted(store_dir.rglob("*")):
        if not source.is_file() or source.name == "lock":
            continue
        relative = source.relative_to(store_dir)
        target = out_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        data = source.read_bytes()
        if relative.parts[0] == "commitlog":
            written = commitlog_written_bytes(data)
            target.write_bytes(data[:written])
            notes[str(relative)] = {"file_bytes": len(data), "kept_bytes": written}
        elif relative.parts[0] == "index":
            # mtime=0: the same bytes give the same .gz, so re-captures diff cleanly.
            (target.parent / (target.name + ".gz")).write_bytes(gzip.compress(data, mtime=0))
            notes[str(relative)] = {"file_bytes": len(data), "stored": "gzip"}
        else:
            target.write_bytes(data)
    return notes


def _run_phases(rmq, proxies, raw_dir, classes_dir, namesrv_proxy_addr) -> dict:
    results = {}
    for phase, mode, group, extra in PHASES:
        for role, proxy in proxies.items():
            proxy.set_output(raw_dir / f"{phase}.{role}.jsonl")
        run = rmq.run_class("Capture", [mode, namesrv_proxy_addr, TOPIC, group, *extra],
                            timeout_s=120, extra_classpath=[classes_dir])
        results[phase] = {"returncode": run.returncode, "seconds": round(run.elapsed_s, 1),
                          "results": [line for line in run.stdout.splitlines()
                                      if line.startswith("RESULT")]}
        if run.returncode != 0:
            raise java_rocketmq.HarnessError(f"Capture {mode} failed:\n{run.stdout}\n{run.stderr}")
        time.sleep(1.0)  # let trailing oneway/async frames reach the proxy before switching files
    return results


def capture(version: str, work_dir: pathlib.Path, raw_dir: pathlib.Path) -> dict:
    """Run the whole capture; returns a summary (timings, client results, store notes)."""
    install = java_rocketmq.RocketMQInstall(version)
    install_s = install.install()
    shutil.rmtree(work_dir, ignore_errors=True)
    raw_dir.mkdir(parents=True, exist_ok=True)
    for stale in raw_dir.glob("*.jsonl"):
        stale.unlink()
    namesrv_port = java_rocketmq.free_port()
    broker_port = java_rocketmq.free_port(offsets=(-2, 0, 1))
    namesrv_proxy_port = java_rocketmq.free_port()
    broker_proxy_port = java_rocketmq.free_port()
    rewrite = (f"127.0.0.1:{broker_port}", f"127.0.0.1:{broker_proxy_port}")
    proxies = {
        "namesrv": capture_proxy.CaptureProxy(namesrv_proxy_port, namesrv_port,
                                              raw_dir / "boot.namesrv.jsonl", [rewrite]),
        "broker": capture_proxy.CaptureProxy(broker_proxy_port, broker_port,
                                             raw_dir / "boot.broker.jsonl"),
    }
    rmq = java_rocketmq.JavaRocketMQ(work_dir, install, namesrv_port=namesrv_port,
                                     broker_port=broker_port,
                                     broker_namesrv_addr=f"127.0.0.1:{namesrv_proxy_port}")
    classes = java_rocketmq.compile_java(install, [pathlib.Path(__file__).parent / "Capture.java"],
                                         work_dir / "classes")
    for proxy in proxies.values():
        proxy.start()
    try:
        with rmq:
            phases = _run_phases(rmq, proxies, raw_dir, classes, f"127.0.0.1:{namesrv_proxy_port}")
            ready_s = dict(rmq.ready_s)
    finally:
        for proxy in proxies.values():
            proxy.stop()
    return {"version": version, "install_s": round(install_s, 1), "ready_s": ready_s,
            "ports": {"namesrv": namesrv_port, "broker": broker_port,
                      "namesrv_proxy": namesrv_proxy_port, "broker_proxy": broker_proxy_port},
            "phases": phases, "store_dir": str(rmq.store_dir)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=java_rocketmq.DEFAULT_VERSION)
    parser.add_argument("--work-dir", default="/tmp/pybroker-capture")
    parser.add_argument("--raw-dir", default=None, help="default <work-dir>/raw")
    parser.add_argument("--out", default=None, help="default tests/golden/java-<version>")
    args = parser.parse_args(argv)
    work_dir = pathlib.Path(args.work_dir)
    raw_dir = pathlib.Path(args.raw_dir) if args.raw_dir else work_dir.parent / "pybroker-raw"
    out_dir = pathlib.Path(args.out) if args.out else \
        REPO_ROOT / "tests" / "golden" / f"java-{args.version}"
    summary = capture(args.version, work_dir, raw_dir)
    summary["curated"] = curate(raw_dir, out_dir)
    summary["store"] = copy_store(pathlib.Path(summary["store_dir"]), out_dir / "store")
    (raw_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    sys.stdout.write(json.dumps(summary, indent=1) + "\n")
    missing = [name for name, count in summary["curated"].items()
               if count == "missing" and name not in OPTIONAL]
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
