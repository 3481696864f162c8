# Re-create tests/golden/java-5.3.3/pop/bodies.json: POP bodies as Java 5.3.3 writes them.
"""Usage: ``python tools/java_capture/capture_pop_bodies.py [--out FILE]``.

Compiles PopBodies.java against the pinned Java 5.3.3 jars (tools/java_rocketmq.py installs
them) and records each ``name<TAB>text`` line it prints: check-point, ack and batch-ack bodies
(fastjson), a receipt handle, BATCH_ACK_MESSAGE and QUERY_ASSIGNMENT bodies, and order-POP
counts, commits and consumerOrderInfo.json as ConsumerOrderInfoManager computes them (the
last-consume time, a wall clock, is zeroed). tests/unit/protocol/test_pop.py reads it.
"""
import argparse
import json
import pathlib
import sys
import tempfile

TOOLS_DIR = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOOLS_DIR))

import java_rocketmq  # noqa: E402

REPO_ROOT = TOOLS_DIR.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "golden" / "java-5.3.3" / "pop" / "bodies.json"


def capture() -> dict[str, str]:
    install = java_rocketmq.RocketMQInstall("5.3.3")
    install.install()
    with tempfile.TemporaryDirectory(prefix="pop-bodies-") as scratch:
        classes = java_rocketmq.compile_java(
            install, [pathlib.Path(__file__).with_name("PopBodies.java")], scratch)
        run = java_rocketmq.run_java(
            ["java", "-cp", install.classpath([classes]), "PopBodies"], timeout_s=120)
    if run.returncode != 0:
        raise SystemExit(f"PopBodies failed: {run.stderr[-2000:]}")
    lines = [line.split("\t", 1) for line in run.stdout.splitlines() if "\t" in line]
    return {name: text for name, text in lines}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    values = capture()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(values)} bodies written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
