"""`pybroker standalone` says where it serves and how to send a test message, and that works;
the broker's ports listen on every interface like Java's unless bindAddress names one.

Method: a real `pybroker standalone` on free loopback ports (stdout and stderr go to its log
file); the banner it prints once serving is read from that log, the addresses and store path
in it are compared with the broker's, and its send command is run verbatim in a shell: it must
print SEND_OK and the message must be in the queue it names. The listening sockets of the
broker's processes are read with psutil: 0.0.0.0 by default, 127.0.0.1 with bindAddress; with
the metrics endpoint on, the banner's metrics URL answers with the metric families.
"""
import re
import subprocess
import time
import urllib.request

import psutil
import pytest

from pybroker._testbase.cluster import StandaloneBroker, free_port

pytestmark = [pytest.mark.slow]
BANNER_TIMEOUT_S = 10.0


def _banner(broker: StandaloneBroker) -> str:
    deadline = time.monotonic() + BANNER_TIMEOUT_S
    while True:
        text = broker._log_text()
        # The command is the one line after "Send a test message:" (DOTALL is for the banner
        # itself; log lines of late workers may follow it in the same file).
        match = re.search(r"^pybroker .* standalone is serving.*?^Send a test message:\n[^\n]*\n",
                          text, re.MULTILINE | re.DOTALL)
        if match:
            return match.group(0)
        assert time.monotonic() < deadline, text[-3000:]
        time.sleep(0.05)


def _listening(broker: StandaloneBroker) -> set[tuple[str, int]]:
    processes = [psutil.Process(broker.process.pid)]
    processes += processes[0].children(recursive=True)
    found = set()
    for process in processes:
        for connection in process.net_connections(kind="tcp"):
            if connection.status == psutil.CONN_LISTEN:
                found.add((connection.laddr.ip, connection.laddr.port))
    return found


def test_banner_names_addresses_store_and_a_send_command_that_works(tmp_path):
    with StandaloneBroker(tmp_path) as broker:
        banner = _banner(broker)
        assert f"NameServer  {broker.namesrv_addr}" in banner
        assert f"broker      {broker.broker_addr}" in banner
        assert f"store       {broker.store_dir}\n" in banner
        assert "metrics     off (metricsExporterType=PROM in broker.conf serves " \
               "Prometheus)\n" in banner
        assert f"kill -TERM {broker.process.pid}" in banner
        command = banner.rstrip("\n").splitlines()[-1].strip()
        sent = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr[-3000:]
        assert sent.stdout.startswith("SEND_OK "), sent.stdout
        queue_id = int(re.search(r"queue_id=(\d+)", sent.stdout).group(1))
        broker.wait_max_offset("TopicTest", queue_id, 1)
        port = broker.broker_port
        assert {("0.0.0.0", port), ("0.0.0.0", port - 2)} <= _listening(broker)


def test_bind_address_binds_one_address_and_the_banner_names_the_metrics_url(tmp_path):
    metrics_port = free_port()
    with StandaloneBroker(tmp_path, {"bindAddress": "127.0.0.1", "metricsExporterType": "PROM",
                                     "metricsPromExporterPort": str(metrics_port)}) as broker:
        listening = {entry for entry in _listening(broker)
                     if entry[1] in (broker.broker_port, broker.broker_port - 2)}
        assert listening == {("127.0.0.1", broker.broker_port),
                             ("127.0.0.1", broker.broker_port - 2)}
        url = re.search(r"^  metrics     (http://\S+)$", _banner(broker), re.MULTILINE).group(1)
        assert url == f"http://127.0.0.1:{metrics_port}/metrics"     # brokerIP1's address
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert b"\nrocketmq_topic_number{" in answer.read()
        assert "0.0.0.0:" not in _banner(broker).split("broker", 1)[1].splitlines()[0]
