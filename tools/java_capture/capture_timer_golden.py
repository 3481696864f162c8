# Captures the timer store files a real Java 5.3.3 broker writes (timerlog, timerwheel, timercheck,
# timermetrics) for the format tests of tests/unit/store/test_timer_files.py.
"""Re-create tests/golden/java-5.3.3/timer/ from a live Java 5.3.3 broker.

Usage: ``python tools/java_capture/capture_timer_golden.py [--out DIR] [--work-dir DIR]``.

The broker runs the test profile with small timer files (``mappedFileSizeTimerLog=300``: five
units and a 40-byte blank per file), a roll window of 6 slots and recalls enabled. The official
Java 5.3.3 client (tools/java_compat/TimerClient.java) parks: three messages in one slot, delays
by seconds and by ms, one past delivery time, one delay level, a 20 s delay (rolls twice) and a
5 s delay that it then recalls; a consumer waits for the five short ones. The broker is stopped
cleanly 14 s after the sends and the files are copied:

* ``timerlog/`` as written (every file);
* ``timerwheel.slots``: the wheel's used slots only (the file is 38,707,200 bytes, almost all
  zero): records of a big-endian u32 slot index and the slot's 32 bytes;
* ``timercheck`` (the whole page) and ``timermetrics``;
* ``capture.json``: the broker overrides, the client's RESULT lines, the wheel file size.
"""
import argparse
import json
import pathlib
import shutil
import struct
import sys
import tempfile
import time

TOOLS_DIR = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOOLS_DIR))

import java_rocketmq  # noqa: E402

REPO_ROOT = TOOLS_DIR.parent
VERSION = "5.3.3"
TOPIC = "TimerCaptureTopic"
SLOT_BYTES = 32
OVERRIDES = {"mappedFileSizeTimerLog": "300", "timerRollWindowSlot": "6",
             "timerPrecisionMs": "1000", "recallMessageEnable": "true",
             "timerFlushIntervalMs": "500"}
SEND = ("same-1/deliver/4000,same-2/deliver/4000,same-3/deliver/4000,sec/sec/3,"
        "ms/ms/2500,past/past/5000,level/level/1,long/sec/20,recall/sec/5")


def used_slots(wheel: bytes) -> bytes:
    """(u32 index, 32 slot bytes) of every slot that is not all zero."""
    out = bytearray()
    zero = bytes(SLOT_BYTES)
    for index in range(len(wheel) // SLOT_BYTES):
        slot = wheel[index * SLOT_BYTES:(index + 1) * SLOT_BYTES]
        if slot != zero:
            out += struct.pack(">I", index) + slot
    return bytes(out)


def capture(work_dir: pathlib.Path, out_dir: pathlib.Path) -> None:
    install = java_rocketmq.RocketMQInstall(VERSION)
    install.require()
    classes = work_dir / "classes"
    java_rocketmq.compile_java(install, [TOOLS_DIR / "java_compat" / "TimerClient.java"],
                               classes)
    rmq = java_rocketmq.JavaRocketMQ(work_dir / "java", install, free_ports=True,
                                     broker_overrides=OVERRIDES)
    with rmq:
        rmq.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "4", "-w", "4")
        run = rmq.run_class("TimerClient", [rmq.namesrv_addr, f"topic={TOPIC}", "run=capture",
                                            f"send={SEND}", "recall=recall", "consume=6",
                                            "timeout=40"],
                            timeout_s=90, extra_classpath=[classes])
        if run.returncode != 0:
            raise SystemExit(f"TimerClient failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        results = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
        time.sleep(4)      # the long message rolls twice meanwhile; flushes every 500 ms
    store = rmq.store_dir
    if out_dir.exists():
        shutil.rmtree(out_dir)
    (out_dir / "timerlog").mkdir(parents=True)
    for path in sorted((store / "timerlog").iterdir()):
        shutil.copyfile(path, out_dir / "timerlog" / path.name)
    wheel = (store / "timerwheel").read_bytes()
    (out_dir / "timerwheel.slots").write_bytes(used_slots(wheel))
    shutil.copyfile(store / "config" / "timercheck", out_dir / "timercheck")
    shutil.copyfile(store / "config" / "timermetrics", out_dir / "timermetrics")
    (out_dir / "capture.json").write_text(json.dumps(
        {"version": VERSION, "topic": TOPIC, "overrides": OVERRIDES, "send": SEND,
         "wheel_file_bytes": len(wheel), "results": results}, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path,
                        default=REPO_ROOT / "tests" / "golden" / f"java-{VERSION}" / "timer")
    parser.add_argument("--work-dir", type=pathlib.Path, default=None)
    args = parser.parse_args()
    if args.work_dir is None:
        with tempfile.TemporaryDirectory(prefix="timer-capture-") as work:
            capture(pathlib.Path(work), args.out)
    else:
        capture(args.work_dir, args.out)
    print(f"captured into {args.out}")


if __name__ == "__main__":
    main()
