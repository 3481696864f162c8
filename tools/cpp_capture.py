# Capture golden frames from the RocketMQ C++ client core (PyPI `rocketmq` 0.4.4) via capture_proxy.
"""Records what the C++ client core sends: a `pybroker standalone` behind two capture proxies
(tools/capture_proxy.py; the NameServer proxy rewrites the broker address so the client goes
through the broker proxy), then tests/compat/cppclient/rmqcpp.py sends (sync, oneway, batch)
and push-consumes. The client's frames (c2s) and the broker's answers are written to
tests/golden/cpp-0.4.4/{send,consume}.broker.jsonl and {send,consume}.namesrv.jsonl.

Usage: python tools/cpp_capture.py   (needs `pip install rocketmq==0.4.4`)
"""
import pathlib
import subprocess
import sys
import tempfile

import capture_proxy

from pybroker._testbase.cluster import StandaloneBroker, free_port

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "golden" / "cpp-0.4.4"
DRIVER = ROOT / "tests" / "compat" / "cppclient" / "rmqcpp.py"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cpp-capture-") as work, \
            StandaloneBroker(work) as broker:
        namesrv_port, broker_port = free_port(), free_port()
        rewrite = (broker.broker_addr, f"127.0.0.1:{broker_port}")
        proxies = [capture_proxy.CaptureProxy(namesrv_port, broker.namesrv_port,
                                              OUT / "send.namesrv.jsonl", [rewrite]),
                   capture_proxy.CaptureProxy(broker_port, broker.broker_port,
                                              OUT / "send.broker.jsonl")]
        for proxy in proxies:
            proxy.start()
        try:
            namesrv = f"127.0.0.1:{namesrv_port}"
            for phase, args in (("send", ["send", namesrv, "CppCapture", "1", "cpp_producer"]),
                                ("consume", ["consume", namesrv, "CppCapture", "5",
                                             "cpp_consumer", "30"])):
                for proxy, role in zip(proxies, ("namesrv", "broker"), strict=True):
                    proxy.set_output(OUT / f"{phase}.{role}.jsonl")
                run = subprocess.run([sys.executable, str(DRIVER), *args], capture_output=True,
                                     text=True, timeout=120)
                sys.stdout.write(run.stdout)
                if run.returncode != 0:
                    sys.stderr.write(run.stderr)
                    return 1
        finally:
            for proxy in proxies:
                proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
