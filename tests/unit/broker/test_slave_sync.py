"""A slave learns its master's addresses as Java's does and takes the master's documents.

Method: SlaveLink over a real MetadataState in tmp_path and a real eventfd; REGISTER_BROKER
answers are built with the header schema the NameServer uses; the master's documents are the
JSON bodies a master sends (fastjson-style bare keys included). The address file and the
persisted documents are read back from disk.
"""
import os

from pybroker.broker.metadata import MetadataState
from pybroker.broker.slave_sync import SlaveLink
from pybroker.config import load_broker_config
from pybroker.proc.wake import WakeFd
from pybroker.protocol import fastjson, headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.store import config_docs, paths


def _link(tmp_path, **overrides) -> tuple[SlaveLink, WakeFd, str]:
    root = str(tmp_path / "store")
    config = load_broker_config(overrides=dict(
        {"storePathRootDir": root, "brokerRole": "SLAVE", "brokerId": "1",
         "brokerName": "broker-a"}, **overrides))
    os.makedirs(paths.run_dir(root))
    wake = WakeFd()
    return SlaveLink(config, MetadataState(config), wake), wake, root


def _answer(ha: str | None, master: str | None) -> RemotingCommand:
    ext = headers.encode_header(headers.REGISTER_BROKER_RESPONSE,
                                {"ha_server_addr": ha, "master_addr": master})
    return RemotingCommand(code=0, ext_fields=ext)


def _address_file(root: str) -> str | None:
    try:
        with open(paths.ha_master_address_path(root)) as source:
            return source.read().strip()
    except FileNotFoundError:
        return None


def test_addresses_from_the_nameserver(tmp_path):
    link, wake, root = _link(tmp_path)
    assert _address_file(root) is None
    link.on_registered(_answer("10.0.0.1:10912", "10.0.0.1:10911"))
    assert _address_file(root) == "10.0.0.1:10912" and wake.consume() == 1
    assert link.master_address == "10.0.0.1:10911"
    link.on_registered(_answer("10.0.0.1:10912", "10.0.0.1:10911"))
    assert wake.consume() == 0, "an unchanged address does not wake the ha worker"
    # The master went away: no master to sync from, but the HA address is kept (Java keeps
    # the last one: the slave reconnects when the master returns there).
    link.on_registered(_answer(None, None))
    assert link.master_address is None and _address_file(root) == "10.0.0.1:10912"
    link.on_registered(_answer("10.0.0.2:10912", "10.0.0.2:10911"))
    assert _address_file(root) == "10.0.0.2:10912" and wake.consume() == 1
    link.close()


def test_configured_ha_master_address_is_never_replaced(tmp_path):
    link, wake, root = _link(tmp_path, haMasterAddress="192.168.1.9:30912")
    assert _address_file(root) == "192.168.1.9:30912" and wake.consume() == 1
    link.on_registered(_answer("10.0.0.1:10912", "10.0.0.1:10911"))
    assert _address_file(root) == "192.168.1.9:30912"
    assert link.master_address == "10.0.0.1:10911"      # metadata sync still follows it
    link.close()


def test_documents_from_the_master(tmp_path):
    link, _, root = _link(tmp_path)
    changed = []
    link.on_changed = lambda: changed.append(True)
    topics = (b'{"dataVersion":{"counter":7,"timestamp":1700000000000},"topicConfigTable":'
              b'{"MasterTopic":{"topicName":"MasterTopic","readQueueNums":4,'
              b'"writeQueueNums":4,"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,'
              b'"order":false}}}')
    assert link._topics(fastjson.loads(topics)) is True
    assert link._topics(fastjson.loads(topics)) is False, "same data version: kept"
    assert "MasterTopic" in link.metadata.topic_configs()
    link.metadata.offsets.commit("SlaveOnly", "T", 0, 5)   # committed while the master was down
    link._offsets(fastjson.loads(b'{"offsetTable":{"T@G":{0:3,1:9}}}'))
    assert link.metadata.offsets.query("G", "T", 1) == 9
    assert link.metadata.offsets.query("SlaveOnly", "T", 0) == 5
    link._delay_offsets(fastjson.loads(b'{"offsetTable":{1:12,3:4}}'))
    delay = config_docs.load_delay_offsets(paths.config_path(root, paths.DELAY_OFFSET_CONFIG))
    assert delay.offset_table == {1: 12, 3: 4}
    saved = config_docs.load_topics(paths.config_path(root, paths.TOPICS_CONFIG))
    assert "MasterTopic" in saved.topic_config_table and saved.data_version.counter == 7
    saved_offsets = config_docs.load_consumer_offsets(
        paths.config_path(root, paths.CONSUMER_OFFSET_CONFIG))
    assert saved_offsets.offset_table["T@G"] == {0: 3, 1: 9}
    link.close()


def test_message_request_modes_from_the_master_and_a_4x_master(tmp_path, caplog):
    link, _, root = _link(tmp_path)
    table = (b'{"messageRequestModeMap":{"T":{"G":{"consumerGroup":"G","mode":"POP",'
             b'"popShareQueueNum":1,"topic":"T"}}}}')
    assert link._request_modes(fastjson.loads(table)) is False   # no snapshot change
    saved = config_docs.load_message_request_modes(
        paths.config_path(root, paths.MESSAGE_REQUEST_MODE_CONFIG))
    assert saved.mode_table["T"]["G"].mode == "POP"
    # A 4.x master answers REQUEST_CODE_NOT_SUPPORTED to 402: said once, never an error.
    code = RequestCode.GET_ALL_MESSAGE_REQUEST_MODE
    with caplog.at_level("INFO", logger="pybroker.broker.slave_sync"):
        for _ in range(3):
            assert link._not_served(code, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "m:1")
    assert len([r for r in caplog.records if "does not serve" in r.message]) == 1
    assert not link._not_served(code, ResponseCode.SYSTEM_ERROR, "m:1")
    assert not link._not_served(RequestCode.GET_ALL_TOPIC_CONFIG,
                                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "m:1")
    link.close()


def test_a_4x_master_s_timer_refusal_is_logged_once_across_its_restart(tmp_path, caplog):
    """A 4.x master refuses GET_TIMER_CHECK_POINT every round; a restart of it in between (the
    connection refused for a while) is one more cause, logged once too, and the refusal after
    it is not news again (CI: a slow Java 4.9.8 restart logged it twice)."""
    import asyncio

    from pybroker.remoting import RequestTable, start_server

    link, _, _ = _link(tmp_path, timerWheelEnable="true")
    code = RequestCode.GET_TIMER_CHECK_POINT

    async def scenario() -> list[bool]:
        server = await start_server("127.0.0.1", 0, RequestTable())   # serves no code
        address = server.address
        port = int(address.rsplit(":", 1)[1])
        taken = [await link._sync_timer(address, code, lambda body: None) for _ in range(3)]
        server.close()
        await server.wait_closed()
        taken += [await link._sync_timer(address, code, lambda body: None) for _ in range(2)]
        server = await start_server("127.0.0.1", port, RequestTable())
        taken += [await link._sync_timer(address, code, lambda body: None) for _ in range(3)]
        server.close()
        await server.wait_closed()
        link.pool.close()
        return taken

    with caplog.at_level("ERROR", logger="pybroker.broker.slave_sync"):
        assert asyncio.run(scenario()) == [False] * 8
    messages = [record.getMessage() for record in caplog.records]
    assert sum("not supported" in message for message in messages) == 1, messages
    assert len(messages) >= 2, messages             # and the outage's cause(s), once each
    link.close()
