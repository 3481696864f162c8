"""README's three-command controller mode works: Apache's controller and the two shipped
conf/controller replicas elect a master, replicate, and fail over.

Method: take the three commands from README.md and run them as written except for free ports
and temp stores (the conf files are copied with the ports, paths and addresses replaced): the
tools/java_rocketmq.py controller command starts Apache's controller 5.3.3, the standalone
replica must be elected master and the other join its SyncStateSet; after a few sends the
master is killed -9 and the second replica must answer SEND_OK, holding every acknowledged
message.
"""
import pathlib
import subprocess
import sys

import pytest

from pybroker._testbase import controller_cluster as cc
from pybroker._testbase.cluster import free_port
from pybroker._testbase.ha_cluster import BROKER_READY_LINE, _Process
from pybroker.config import load_properties
from pybroker.protocol.codes import ResponseCode
from tests import peers
from tests.ha_support import client_for, read_queue, send, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _readme_commands() -> list[list[str]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line.split("#")[0].split() for line in readme.splitlines()
                if "conf/controller/" in line and not line.startswith("`")]
    assert len(commands) == 3, commands
    return commands


def _conf(source: str, target: pathlib.Path, **replaced) -> str:
    values = load_properties(ROOT / source)
    values.update({key: str(value) for key, value in replaced.items()})
    target.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return str(target)


def test_readme_controller_mode(tmp_path):
    peers.java_install("5.3.3")
    controller_cmd, first_cmd, second_cmd = _readme_commands()
    assert controller_cmd[:3] == ["python", "tools/java_rocketmq.py", "controller"]
    assert first_cmd[:2] == ["pybroker", "standalone"] and second_cmd[:2] == ["pybroker",
                                                                              "broker"]
    controller_port, namesrv_port = free_port(), free_port()
    ports = [free_port((-2, 0, 1)), free_port((-2, 0, 1))]
    controller_addr = f"127.0.0.1:{controller_port}"
    controller_conf = _conf(controller_cmd[4], tmp_path / "controller.conf",
                            controllerDLegerPeers=f"n0-{controller_addr}",
                            controllerStorePath=tmp_path / "controller-store")
    replica = {"controllerAddr": controller_addr, "namesrvAddr": f"127.0.0.1:{namesrv_port}"}
    first_conf = _conf(first_cmd[3], tmp_path / "n0.conf", listenPort=ports[0],
                       storePathRootDir=tmp_path / "n0", **replica)
    second_conf = _conf(second_cmd[3], tmp_path / "n1.conf", listenPort=ports[1],
                        storePathRootDir=tmp_path / "n1", **replica)
    controller = subprocess.Popen([sys.executable, str(ROOT / controller_cmd[1]), "controller",
                                   "-c", controller_conf, "--work-dir", str(tmp_path / "ctl")],
                                  stdout=subprocess.PIPE, text=True, start_new_session=True)
    first = _Process(tmp_path / "first", ["standalone", "-c", first_conf, "--namesrv-port",
                                          str(namesrv_port)])
    second = _Process(tmp_path / "second", ["broker", "-c", second_conf])
    first.ready_line = second.ready_line = BROKER_READY_LINE
    try:
        assert "boot success" in controller.stdout.readline()
        first.start()
        assert cc.wait_for_master(controller_addr, "broker-a", 60)["master_address"] == \
            f"127.0.0.1:{ports[0]}"
        second.start()
        cc.wait_for_master(controller_addr, "broker-a", 60, members={1, 2})
        with client_for(f"127.0.0.1:{ports[0]}") as client:
            for index in range(50):
                assert send(client, "ReadmeCtrl", b"r%d|" % index, index % 4,
                            f"r{index}").code == ResponseCode.SUCCESS
        first.kill()
        cc.wait_for_master(controller_addr, "broker-a", 30, not_address=f"127.0.0.1:{ports[0]}")

        def answers() -> bool:
            with client_for(f"127.0.0.1:{ports[1]}") as client:
                return send(client, "ReadmeCtrl", b"after|", 0, "after").code == \
                    ResponseCode.SUCCESS
        wait_for(answers, 10, "SEND_OK from the second replica")
        with client_for(f"127.0.0.1:{ports[1]}") as client:
            found = cc.keys_of(body for queue in range(4)
                               for body in read_queue(client, "ReadmeCtrl", queue))
        assert all(f"r{index}" in found for index in range(50))
    finally:
        second.kill()
        first.kill()
        controller.terminate()
        controller.wait(60)
        controller.stdout.close()
