"""README's two-command master/slave start works: the shipped conf/ha files make a pair that
replicates.

Method: take the two commands from README.md, run them as written except for free ports (the
gRPC one included) and a temp store (the conf files are copied with listenPort,
storePathRootDir and namesrvAddr replaced; the standalone gets --namesrv-port): the slave must
connect to the master's HA port and end with the master's CommitLog byte for byte after a few
sends.
"""
import pathlib
import re

import pytest

from pybroker._testbase.cluster import free_port
from pybroker._testbase.ha_cluster import BROKER_READY_LINE, _Process
from pybroker.config import load_properties
from pybroker.protocol.codes import ResponseCode
from tests.ha_support import (assert_commitlogs_identical, client_for, position, send,
                              wait_for)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _readme_commands() -> list[list[str]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line.split("#")[0].split() for line in readme.splitlines()
                if re.match(r"pybroker (standalone|broker) -c conf/ha/", line)]
    assert len(commands) == 2, commands
    return commands


def _conf(source: str, target: pathlib.Path, **replaced) -> str:
    values = load_properties(ROOT / source)
    values.update({key: str(value) for key, value in replaced.items()})
    target.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return str(target)


def test_readme_master_slave_pair(tmp_path):
    (master_cmd, slave_cmd) = _readme_commands()
    assert master_cmd[:2] == ["pybroker", "standalone"] and slave_cmd[:2] == ["pybroker",
                                                                              "broker"]
    namesrv_port, master_port, slave_port = free_port(), free_port((-2, 0, 1)), \
        free_port((-2, 0, 1))
    master_store, slave_store = tmp_path / "m", tmp_path / "s"
    # The standalone serves gRPC too (grpcWorkers=1 unless set): its port is a free one, as
    # the others (the default 8081 collided with another test's broker in CI at 6912545).
    master_conf = _conf(master_cmd[3], tmp_path / "m.conf", listenPort=master_port,
                        storePathRootDir=master_store, grpcServerPort=free_port())
    slave_conf = _conf(slave_cmd[3], tmp_path / "s.conf", listenPort=slave_port,
                       storePathRootDir=slave_store, namesrvAddr=f"127.0.0.1:{namesrv_port}")
    master = _Process(tmp_path / "master", ["standalone", "-c", master_conf, "--namesrv-port",
                                            str(namesrv_port)])
    slave = _Process(tmp_path / "slave", ["broker", "-c", slave_conf])
    master.ready_line = slave.ready_line = BROKER_READY_LINE
    try:
        master.start()
        slave.start()
        wait_for(lambda: position(str(master_store), "ha_slaves_connected") == 1, 60,
                 "the slave on the master's HA port")
        with client_for(f"127.0.0.1:{master_port}") as client:
            for index in range(50):
                assert send(client, "ReadmeTopic", b"readme-%d" % index, index % 4,
                            f"r{index}").code == ResponseCode.SUCCESS
        end = position(str(master_store), "written_position")
        wait_for(lambda: position(str(slave_store), "written_position") == end, 30, "replica")
        assert_commitlogs_identical(str(master_store / "commitlog"),
                                    str(slave_store / "commitlog"), end, 1 << 30)
    finally:
        slave.kill()
        master.kill()
