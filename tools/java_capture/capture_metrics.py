# Captures what a real Java 5.3.3 broker's Prometheus endpoint serves, for the metrics tests.
"""Re-create tests/golden/java-5.3.3/metrics.txt from a live Java RocketMQ 5.3.3 broker.

Usage: ``python tools/java_capture/capture_metrics.py [--out FILE]``. Starts a NameServer and a
broker (test profile) with ``metricsExporterType=PROM`` on free 127.0.0.1 ports and drives the
traffic every family needs a series for (pybroker/_testbase/metrics_traffic.py, with
pybroker's Python client: the broker is the thing observed), then scrapes /metrics once the
30 s lag calculator has run. tests/broker/test_prometheus.py compares the family
names and label names of pybroker's endpoint with this file.
"""
import argparse
import asyncio
import pathlib
import sys
import time
import urllib.request

TOOLS_DIR = pathlib.Path(__file__).resolve().parents[1]
REPO_ROOT = TOOLS_DIR.parent
sys.path.insert(0, str(TOOLS_DIR))
sys.path.insert(0, str(REPO_ROOT))

import java_rocketmq  # noqa: E402

from pybroker._testbase.cluster import free_port  # noqa: E402
from pybroker._testbase.metrics_traffic import traffic  # noqa: E402

SCRAPE_AFTER_S = 35          # Java computes the lag families on its own schedule


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO_ROOT / "tests" / "golden" / "java-5.3.3" /
                                             "metrics.txt"))
    args = parser.parse_args()
    port = free_port()
    work = pathlib.Path("/tmp/pybroker-capture-metrics")
    work.mkdir(parents=True, exist_ok=True)
    conf = work / "metrics.conf"
    conf.write_text(f"metricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\n"
                    f"metricsPromExporterPort={port}\n")
    install = java_rocketmq.RocketMQInstall("5.3.3")
    broker = java_rocketmq.JavaRocketMQ(work / "rmq", install, free_ports=True, broker_conf=conf)
    broker.start()
    try:
        started = time.monotonic()
        asyncio.run(traffic(broker.namesrv_addr, SCRAPE_AFTER_S))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        broker.stop()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"{out}: {len(text.splitlines())} lines after {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
