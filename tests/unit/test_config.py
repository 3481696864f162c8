"""The configuration schema reads broker.conf files the way Java RocketMQ does and refuses bad ones.

Method: load the golden Java broker.conf and hand-written files in tmp_path; check every value,
table-driven Java Properties edge cases, a property-based escape round trip, every validator
against values drawn to break it, the derived values and their cross-checks, and the warnings
for unknown keys (caplog on logger "pybroker.config").
"""
import dataclasses
import importlib.util
import logging
import pathlib
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker import config, schema
from pybroker.config_grpc import FRONT_MODULE
from pybroker.errors import ConfigError

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden" / "broker.conf"
AREAS = (config.BrokerConfig, config.StoreConfig, config.RemotingConfig, config.NamesrvConfig,
         config.TlsConfig)
ALL_SPECS = [spec for area in AREAS for spec in config.settings_of(area)]


@pytest.fixture(autouse=True)
def _no_namesrv_environment(monkeypatch):
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)


def write_conf(tmp_path, text: str, name: str = "broker.conf") -> pathlib.Path:
    path = tmp_path / name
    path.write_bytes(text.encode("iso-8859-1"))
    return path


def load_text(tmp_path, text: str) -> config.Config:
    return config.load_broker_config(write_conf(tmp_path, text))


def config_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == "pybroker.config" and record.levelno == logging.WARNING]


# --- the golden Java broker.conf ----------------------------------------------------------------
GOLDEN_EXPECTED = {
    ("broker", "broker_cluster_name"): "DefaultCluster",
    ("broker", "broker_name"): "broker-a",
    ("broker", "broker_id"): 0,
    ("broker", "broker_ip1"): "10.0.0.21",
    ("broker", "broker_ip2"): "10.0.0.22",
    ("broker", "namesrv_addr"): "10.0.0.11:9876;10.0.0.12:9876",
    ("broker", "listen_port"): 10911,
    ("broker", "auto_create_topic_enable"): False,
    ("broker", "auto_create_subscription_group"): True,
    ("broker", "default_topic_queue_nums"): 4,
    ("broker", "enable_property_filter"): True,
    ("broker", "trace_topic_enable"): True,
    ("broker", "region_id"): "cn-hangzhou",
    ("store", "delete_when"): "04;16",
    ("store", "file_reserved_time"): 48,
    ("store", "broker_role"): config.BrokerRole.SYNC_MASTER,
    ("store", "flush_disk_type"): config.FlushDiskType.ASYNC_FLUSH,
    ("store", "store_path_root_dir"): "/data/rocketmq/store",
    ("store", "store_path_commit_log"): "/data/rocketmq/store/commitlog",
    ("store", "mapped_file_size_commit_log"): 1073741824,
    ("store", "mapped_file_size_consume_queue"): 6000000,
    ("store", "max_message_size"): 4194304,
    ("store", "disk_max_used_space_ratio"): 88,
    ("store", "flush_interval_commit_log"): 1000,
    ("store", "transient_store_pool_enable"): False,
    ("store", "message_delay_level"):
        "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h 1d",
    ("store", "ha_listen_port"): 10912,
    ("remoting", "server_worker_threads"): 8,
    ("broker", "wait_time_mills_in_send_queue"): 400,
}
GOLDEN_NOT_USED = ["rocketmqHome", "sendMessageThreadPoolNums", "pullMessageThreadPoolNums",
                   "useReentrantLockWhenPutMessage"]


def test_golden_broker_conf_loads_every_value_as_java_reads_it(caplog):
    caplog.set_level(logging.WARNING, logger="pybroker.config")
    loaded = config.load_broker_config(GOLDEN)
    for (area, attribute), expected in GOLDEN_EXPECTED.items():
        assert getattr(getattr(loaded, area), attribute) == expected, attribute
    assert loaded.unknown_keys == tuple(GOLDEN_NOT_USED)
    messages = config_warnings(caplog)
    unused = [message for message in messages if "does not use" in message]
    assert len(unused) == len(GOLDEN_NOT_USED)
    for key, message in zip(GOLDEN_NOT_USED, unused, strict=True):
        assert key in message
    # The rest: schema keys the golden file sets that pybroker accepts but does not act on.
    honest = [message for message in messages if "does not use" not in message]
    assert honest and all("is accepted but not acted on" in message for message in honest)


def test_golden_derived_values():
    derived = config.load_broker_config(GOLDEN).derived
    assert derived.namesrv_addresses == (("10.0.0.11", 9876), ("10.0.0.12", 9876))
    assert derived.fast_listen_port == 10909
    assert derived.broker_addr == "10.0.0.21:10911"
    assert derived.ha_server_addr == "10.0.0.22:10912"
    assert len(derived.delay_levels_ms) == 19
    assert derived.delay_levels_ms[0] == 1000 and derived.delay_levels_ms[-1] == 86_400_000
    assert derived.delete_when_hours == (4, 16)
    assert derived.consume_queue_entries_per_file == 300000


# --- Java Properties syntax ---------------------------------------------------------------------
PROPERTIES_CASES = [
    ("a=b", {"a": "b"}),
    ("a = b", {"a": "b"}),
    ("a:b", {"a": "b"}),
    ("a : b", {"a": "b"}),
    ("a b", {"a": "b"}),
    ("a\tb", {"a": "b"}),
    ("a\fb", {"a": "b"}),
    ("a   b c", {"a": "b c"}),
    ("  \t a=b", {"a": "b"}),
    ("a=b  ", {"a": "b  "}),                      # trailing whitespace is kept
    ("a", {"a": ""}),
    ("a=", {"a": ""}),
    ("a==b", {"a": "=b"}),                        # only one separator is skipped
    ("a = : b", {"a": ": b"}),
    ("a b=c", {"a": "b=c"}),                      # whitespace ended the key
    ("a\\=b=c", {"a=b": "c"}),
    ("a\\ b=c", {"a b": "c"}),
    ("a\\:b:c", {"a:b": "c"}),
    ("# c\n! c\n  # c\na=1", {"a": "1"}),
    ("a=1 # not a comment", {"a": "1 # not a comment"}),
    ("a=x\\\n   y", {"a": "xy"}),
    ("a=x \\\n   y", {"a": "x y"}),
    ("a=x\\\\\nb=2", {"a": "x\\", "b": "2"}),        # even backslashes: no continuation
    ("a=x\\\\\\\nyz", {"a": "x\\yz"}),               # odd: continuation
    ("# comment \\\na=1", {"a": "1"}),               # a comment never continues
    ("a=1\\\n# data", {"a": "1# data"}),
    ("a=1\\\n\nb=2", {"a": "1", "b": "2"}),          # empty continuation ends the line
    ("ke\\\n  y=v", {"key": "v"}),
    ("a=x\\", {"a": "x"}),                           # continuation at end of file
    ("a=\\u0041\\u00e9", {"a": "A\u00e9"}),
    ("a=\\uD83D\\uDE00", {"a": "\U0001F600"}),       # UTF-16 surrogate pair -> one character
    ("\\u0041=1", {"A": "1"}),
    ("a=\\t\\n\\r\\f", {"a": "\t\n\r\f"}),
    ("a=\\q\\\\", {"a": "q\\"}),
    ("a=1\r\nb=2\rc=3\n", {"a": "1", "b": "2", "c": "3"}),
    ("a=1\x85b", {"a": "1\x85b"}),                   # NEL is not a Java line break
    ("a=1\nA=2\na=3", {"a": "3", "A": "2"}),        # case-sensitive, last wins
    ("\n\n   \n", {}),
]


@pytest.mark.parametrize("text, expected", PROPERTIES_CASES)
def test_java_properties_syntax(tmp_path, text, expected):
    assert config.load_properties(write_conf(tmp_path, text)) == expected


def test_properties_file_is_read_as_iso_8859_1(tmp_path):
    path = tmp_path / "latin1.conf"
    path.write_bytes(b"regionId=r\xe9gion\n")
    assert config.load_properties(path) == {"regionId": "r\u00e9gion"}


@pytest.mark.parametrize("text", ["a=\\u12G4", "a=\\u12", "x=1\nb=\\u"])
def test_malformed_unicode_escape_names_the_line(tmp_path, text):
    with pytest.raises(ConfigError, match=r"broker\.conf:\d+: Malformed \\uxxxx"):
        config.load_properties(write_conf(tmp_path, text))


_KEY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
_VALUE_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEY_TEXT, _VALUE_TEXT, max_size=5))
def test_properties_line_round_trips(entries):
    text = "\n".join(config.properties_line(key, value) for key, value in entries.items())
    assert config.parse_properties(text) == entries


# --- typed values and validators ----------------------------------------------------------------
def spec(key: str) -> config.SettingSpec:
    return next(item for item in ALL_SPECS if item.key == key)


@pytest.mark.parametrize("key, text, expected", [
    ("listenPort", "+10911", 10911),
    ("listenPort", " 10911 ", 10911),                 # stripped (Java would drop the value)
    ("brokerId", "9223372036854775807", (1 << 63) - 1),
    ("autoCreateTopicEnable", "TRUE", True),
    ("autoCreateTopicEnable", "False", False),
    ("flushDiskType", "SYNC_FLUSH", config.FlushDiskType.SYNC_FLUSH),
    ("regionId", " spaced ", " spaced "),             # strings stay literal
])
def test_typed_values(key, text, expected):
    assert config.parse_value(spec(key), text) == expected


@pytest.mark.parametrize("key, text, rule", [
    ("listenPort", "10_911", "must be a Java int"),
    ("listenPort", "0x2A9F", "must be a Java int"),
    ("listenPort", "2147483648", "must be a Java int (-2147483648..2147483647)"),
    ("brokerId", "9223372036854775808", "must be a Java long"),
    ("autoCreateTopicEnable", "yes", "must be true or false"),
    ("flushDiskType", "sync_flush", "must be one of ASYNC_FLUSH, SYNC_FLUSH"),
    ("brokerRole", "MASTER", "must be one of ASYNC_MASTER, SYNC_MASTER, SLAVE"),
])
def test_type_errors_name_key_value_and_rule(key, text, rule):
    with pytest.raises(ConfigError) as caught:
        config.parse_value(spec(key), text)
    assert str(caught.value).startswith(f"{key}={text}: {rule}")


def test_remoting_workers_fit_below_the_data_plane_slots():
    """Each remoting worker, the supervisor and the timer own a control-block worker slot below
    the data-plane workers' (store/control_block.py): a count that does not fit is refused when
    the file loads, not by the appender at start."""
    from pybroker.store.control_block import (HA, REMOTING_WORKERS_MAX, supervisor_worker,
                                              timer_worker)
    assert supervisor_worker(REMOTING_WORKERS_MAX).slot < timer_worker(REMOTING_WORKERS_MAX).slot
    assert timer_worker(REMOTING_WORKERS_MAX).slot < HA.slot
    setting_spec = spec("remotingWorkers")
    assert config.parse_value(setting_spec, str(REMOTING_WORKERS_MAX)) == REMOTING_WORKERS_MAX
    with pytest.raises(ConfigError):
        config.parse_value(setting_spec, str(REMOTING_WORKERS_MAX + 1))


@pytest.mark.parametrize("hidden", [False, True], ids=["this-build", "no-front"])
def test_grpc_native_front_defaults_to_whether_the_front_is_built(tmp_path, monkeypatch,
                                                                  hidden):
    """grpcNativeFront unset is true exactly where the C++ gRPC front's extension can be found
    (a build without it: the module hidden in sys.modules), and the listing shows that value;
    a file's true or false stands either way."""
    if hidden:
        monkeypatch.setitem(sys.modules, FRONT_MODULE, None)
    built = not hidden and importlib.util.find_spec(FRONT_MODULE) is not None
    if not hidden and not built:
        pytest.skip("this build has no gRPC front (libgrpc++-dev missing at build time)")
    unset = load_text(tmp_path, "brokerName=b\n")
    assert unset.grpc.grpc_native_front is built
    assert ("grpcNativeFront", str(built).lower()) in config.all_settings(unset)
    for text in ("true", "false"):
        loaded = load_text(tmp_path, f"grpcNativeFront={text}\n")
        assert loaded.grpc.grpc_native_front is (text == "true")


# Values tried against every rule: each validator must reject at least one of them.
BREAKERS = ["-2", "-1", "0", "1", "3", "65536", "70000", "100000000", "1000000000", "2147483647",
            "101", "true", "false", "nohost", "a b", "host:0", "25", "04;24", "0s", "1x",
            "h:1;;h:2", "3000"]


@pytest.mark.parametrize("setting_spec", [item for item in ALL_SPECS if item.rule is not None],
                         ids=lambda item: item.key)
def test_every_validator_rejects_a_bad_value(setting_spec):
    rejected = []
    for text in BREAKERS:
        try:
            value = schema._convert(setting_spec, text)
        except ConfigError:
            continue   # not even the right type: another test's business
        if value is None or setting_spec.rule.check(value):
            continue
        with pytest.raises(ConfigError) as caught:
            config.parse_value(setting_spec, text)
        assert str(caught.value) == f"{setting_spec.key}={text}: {setting_spec.rule.text}"
        rejected.append(text)
    assert rejected, f"no value in BREAKERS breaks the rule of {setting_spec.key}"


@pytest.mark.parametrize("key, text", [
    ("listenPort", "70000"), ("listenPort", "2"), ("namesrvAddr", "127.0.0.1"),
    ("namesrvAddr", "127.0.0.1:9876;127.0.0.1:0"), ("deleteWhen", "4am"),
    ("deleteWhen", "24"), ("messageDelayLevel", "1s 5x"), ("messageDelayLevel", "0s"),
    ("messageDelayLevel", ""), ("brokerName", "a b"), ("brokerPermission", "16"),
    ("registerNameServerPeriod", "5000"),
    ("sendRingSizeBytes", "33554433"), ("haMasterAddress", "10.0.0.1"),
    ("diskMaxUsedSpaceRatio", "101"), ("mappedFileSizeConsumeQueue", "19"),
])
def test_file_with_bad_value_stops_loading(tmp_path, key, text):
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, f"{key}={text}\n")
    message = str(caught.value)
    assert message.startswith(f"{key}={text}: ")
    assert message.split(": ", 1)[1] == spec(key).rule.text


def test_all_bad_values_are_reported_together(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, "listenPort=x\nflushDiskType=FAST\nbrokerName=ok\n")
    lines = str(caught.value).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("listenPort=x: ") and lines[1].startswith("flushDiskType=FAST: ")


@pytest.mark.parametrize("key", ["enableDLegerCommitLog", "fetchControllerAddrByDnsLookup"])
def test_unsupported_java_features_stop_loading(tmp_path, caplog, key):
    with pytest.raises(ConfigError, match=f"^{key}=true: must be false"):
        load_text(tmp_path, f"{key}=true\n")
    load_text(tmp_path, f"{key}=false\n")   # Java's default is accepted silently
    assert config_warnings(caplog) == []


def test_controller_mode_settings(tmp_path):
    """Java's controller-mode broker.conf (brokerId=-1, brokerRole=SLAVE) loads; -1 needs
    controller mode, and controller mode needs a controller address."""
    loaded = load_text(tmp_path, "enableControllerMode=true\ncontrollerAddr=127.0.0.1:9878\n"
                                 "brokerId=-1\nbrokerRole=SLAVE\nallAckInSyncStateSet=true\n")
    assert loaded.broker.enable_controller_mode and loaded.broker.broker_id == -1
    assert loaded.store.all_ack_in_sync_state_set
    assert loaded.store.epoch_file_path.endswith("epochFileCheckpoint")
    with pytest.raises(ConfigError, match="^brokerId=-1: must be >= 0"):
        load_text(tmp_path, "brokerId=-1\n")
    with pytest.raises(ConfigError, match="^controllerAddr=: enableControllerMode=true needs"):
        load_text(tmp_path, "enableControllerMode=true\n")
    with pytest.raises(ConfigError, match="^controllerAddr=h:x: "):
        load_text(tmp_path, "enableControllerMode=true\ncontrollerAddr=h:x\n")


# --- unknown keys -------------------------------------------------------------------------------
def test_unknown_key_gives_one_warning_naming_it(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="pybroker.config")
    loaded = load_text(tmp_path, "brokerName=b\ndefaultTopicQueueNum=16\n")
    messages = config_warnings(caplog)
    assert len(messages) == 1
    assert messages[0].endswith("defaultTopicQueueNum: unknown key (ignored); did you mean "
                                "defaultTopicQueueNums?")
    assert loaded.unknown_keys == ("defaultTopicQueueNum",)
    assert loaded.broker.default_topic_queue_nums == 8     # the typo changed nothing


def test_misspelt_durability_key_is_an_error_naming_the_value_in_force(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="pybroker.config")
    loaded = load_text(tmp_path, "flushIntervalComitLog=100\nflushIntervalCommitLog=700\n")
    errors = [record.getMessage() for record in caplog.records
              if record.name == "pybroker.config" and record.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].endswith(
        "flushIntervalComitLog: unknown key, ignored - did you mean flushIntervalCommitLog? "
        "flushIntervalCommitLog is a durability setting and stays flushIntervalCommitLog=700: "
        "correct the key (strictConfig=true refuses unknown keys)")
    assert loaded.store.flush_interval_commit_log == 700


def test_strict_config_refuses_every_unknown_key_at_once(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, "strictConfig=true\nlistenPrt=1\nzzz=2\n")
    assert str(caught.value).splitlines() == [
        "listenPrt: unknown key; did you mean listenPort? (strictConfig=true refuses unknown "
        "keys)", "zzz: unknown key (strictConfig=true refuses unknown keys)"]
    with pytest.raises(ConfigError, match="^listenPrt: unknown key"):
        config.load_broker_config(write_conf(tmp_path, "listenPrt=1\n"), strict=True)


def test_keys_are_case_sensitive_like_java(tmp_path, caplog):
    loaded = load_text(tmp_path, "ListenPort=1234\n")
    assert loaded.broker.listen_port == 10911
    assert loaded.unknown_keys == ("ListenPort",)


def test_broker_key_in_namesrv_file_is_unknown(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="pybroker.config")
    path = write_conf(tmp_path, "listenPort=9877\nbrokerName=b\norderMessageEnable=true\n")
    loaded = config.load_namesrv_config(path)
    assert loaded.namesrv.listen_port == 9877 and loaded.namesrv.order_message_enable is True
    assert loaded.unknown_keys == ("brokerName",)
    assert len(config_warnings(caplog)) == 1


# --- derived values -----------------------------------------------------------------------------
@pytest.mark.parametrize("size, rounded", [(20, 20), (21, 40), (1200010, 1200020),
                                           (6000000, 6000000)])
def test_consume_queue_file_size_rounds_up_to_whole_entries(tmp_path, size, rounded):
    loaded = load_text(tmp_path, f"mappedFileSizeConsumeQueue={size}\n")
    assert loaded.store.mapped_file_size_consume_queue == rounded
    assert loaded.derived.consume_queue_entries_per_file == rounded // 20


def test_ports_follow_listen_port(tmp_path):
    loaded = load_text(tmp_path, "listenPort=20911\n")
    assert loaded.store.ha_listen_port == 20912
    assert loaded.derived.fast_listen_port == 20909
    assert load_text(tmp_path, "listenPort=20911\nhaListenPort=30000\n").store.ha_listen_port \
        == 30000


@pytest.mark.parametrize("ha_port", ["20911", "20909"])
def test_ha_port_may_not_collide(tmp_path, ha_port):
    with pytest.raises(ConfigError, match=f"^haListenPort={ha_port}: must differ"):
        load_text(tmp_path, f"listenPort=20911\nhaListenPort={ha_port}\n")


def test_delay_levels_parse_every_unit(tmp_path):
    loaded = load_text(tmp_path, "messageDelayLevel=2s 3m  4h\t5d\n")
    assert loaded.derived.delay_levels_ms == (2000, 180_000, 14_400_000, 432_000_000)


def test_default_delay_levels_are_java_18():
    levels = config.load_broker_config().derived.delay_levels_ms
    assert len(levels) == 18 and levels[2] == 10_000 and levels[-1] == 7_200_000


def test_commit_log_file_smaller_than_max_message_size_loads_as_in_java(tmp_path, caplog):
    # Java accepts 1 MiB CommitLog files with the default 4 MiB maxMessageSize; a message that
    # does not fit one file is refused at put time instead (tests/broker/test_java_conf.py).
    with caplog.at_level("WARNING", logger="pybroker.config"):
        loaded = load_text(tmp_path, "mappedFileSizeCommitLog=1048576\n")
    assert loaded.store.mapped_file_size_commit_log == 1 << 20
    assert loaded.store.max_message_size == 4 << 20
    assert "refused with MESSAGE_ILLEGAL" in caplog.text
    with pytest.raises(ConfigError, match="^mappedFileSizeCommitLog=64: must be >= 4096"):
        load_text(tmp_path, "mappedFileSizeCommitLog=64\n")


def test_frame_and_ring_must_carry_the_largest_record(tmp_path):
    with pytest.raises(ConfigError, match="^frameMaxBytes=4194304: must carry"):
        load_text(tmp_path, "frameMaxBytes=4194304\n")
    with pytest.raises(ConfigError, match="^sendRingSizeBytes=4194304: must hold two"):
        load_text(tmp_path, "sendRingSizeBytes=4194304\n")
    loaded = load_text(tmp_path, "frameMaxBytes=4194304\nsendRingSizeBytes=1048576\n"
                                 "maxMessageSize=262144\n")
    assert loaded.derived.record_size_max_bytes > 262144


def test_grpc_ring_is_sized_from_the_largest_record_unless_set(tmp_path):
    assert load_text(tmp_path, "").derived.grpc_send_ring_bytes == 16 << 20
    assert load_text(tmp_path, "maxMessageSize=8388608\n").derived.grpc_send_ring_bytes \
        == 32 << 20
    assert load_text(tmp_path, "maxMessageSize=8388608\nsendRingSizeBytes=67108864\n"
                     "grpcSendRingSizeBytes=67108864\n").derived.grpc_send_ring_bytes == 64 << 20
    with pytest.raises(ConfigError, match="^grpcSendRingSizeBytes=8388608: must hold two"):
        load_text(tmp_path, "grpcSendRingSizeBytes=8388608\n")
    with pytest.raises(ConfigError, match="^grpcSendRingSizeBytes=3145728: must be 0 or a power"):
        load_text(tmp_path, "grpcSendRingSizeBytes=3145728\n")


def test_index_file_must_stay_below_2_gib(tmp_path):
    with pytest.raises(ConfigError, match="^maxIndexNum=200000000: IndexFile would be"):
        load_text(tmp_path, "maxIndexNum=200000000\n")


def test_commit_log_path_follows_root(tmp_path):
    loaded = load_text(tmp_path, f"storePathRootDir={tmp_path}/s\n")
    assert loaded.store.store_path_commit_log == f"{tmp_path}/s/commitlog"


def test_disk_ratio_is_clamped_like_java(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="pybroker.config")
    assert load_text(tmp_path, "diskMaxUsedSpaceRatio=98\n").store.disk_max_used_space_ratio == 95
    assert "diskMaxUsedSpaceRatio=98" in config_warnings(caplog)[0]


def test_broker_id_follows_role(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="pybroker.config")
    with pytest.raises(ConfigError, match="^brokerId=0: must be > 0 when brokerRole=SLAVE"):
        load_text(tmp_path, "brokerRole=SLAVE\n")
    assert load_text(tmp_path, "brokerRole=SLAVE\nbrokerId=2\n").broker.broker_id == 2
    assert load_text(tmp_path, "brokerId=3\n").broker.broker_id == 0
    assert "brokerId=3" in config_warnings(caplog)[0]


def test_namesrv_addr_defaults_to_environment_like_java(monkeypatch):
    monkeypatch.setenv("NAMESRV_ADDR", "10.1.1.1:9876")
    loaded = config.load_broker_config()
    assert loaded.broker.namesrv_addr == "10.1.1.1:9876"
    assert loaded.derived.namesrv_addresses == (("10.1.1.1", 9876),)


def test_empty_optional_string_means_not_set(tmp_path):
    loaded = load_text(tmp_path, "haMasterAddress=\nnamesrvAddr=\n")
    assert loaded.store.ha_master_address is None and loaded.broker.namesrv_addr is None


def test_overrides_win_over_the_file_and_take_typed_values(tmp_path):
    path = write_conf(tmp_path, "listenPort=20911\nbrokerName=from-file\n")
    loaded = config.load_broker_config(path, {"listenPort": 30911, "slaveReadEnable": True,
                                              "brokerName": "from-override"})
    assert loaded.broker.listen_port == 30911 and loaded.broker.slave_read_enable is True
    assert loaded.broker.broker_name == "from-override"
    with pytest.raises(ConfigError, match="^listenPort=0: "):
        config.load_broker_config(overrides={"listenPort": 0})


# --- the schema and listings --------------------------------------------------------------------
def test_java_defaults_of_the_reference():
    """Defaults from protocol.md §4.9, §5.1, §5.3 and §6 (Java 4.9.x)."""
    store = config.StoreConfig()
    assert (store.mapped_file_size_commit_log, store.mapped_file_size_consume_queue) == \
        (1 << 30, 300000 * 20)
    assert (store.flush_interval_commit_log, store.sync_flush_timeout) == (500, 5000)
    assert (store.file_reserved_time, store.delete_when) == (72, "04")
    assert (store.max_transfer_bytes_on_message_in_memory,
            store.max_transfer_count_on_message_in_memory) == (256 * 1024, 32)
    assert (store.max_transfer_bytes_on_message_in_disk,
            store.max_transfer_count_on_message_in_disk) == (64 * 1024, 8)
    assert (store.max_hash_slot_num, store.max_index_num) == (5_000_000, 20_000_000)
    assert (store.ha_transfer_batch_size, store.ha_housekeeping_interval) == (32768, 20000)
    assert store.ha_slave_fallbehind_max == 256 << 20 and store.max_message_size == 4 << 20
    broker = config.BrokerConfig(broker_ip1="127.0.0.1", broker_ip2="127.0.0.1")
    assert (broker.transaction_time_out, broker.transaction_check_max) == (6000, 15)
    assert broker.short_polling_time_mills == 1000 and broker.default_topic_queue_nums == 8
    assert config.NamesrvConfig().listen_port == 9876


def test_schema_keys_and_attributes():
    for area in AREAS:
        keys = [item.key for item in config.settings_of(area)]
        assert len(keys) == len(set(keys)), area
    for item in ALL_SPECS:
        assert item.unit in ("", "ms", "s", "hours", "bytes", "MB/s", "pages", "count",
                             "percent")
        assert item.doc and item.attribute == schema._snake(item.key)
    assert spec("brokerIP1").attribute == "broker_ip1"
    assert spec("checkCRCOnRecover").attribute == "check_crc_on_recover"
    own = {item.key for item in ALL_SPECS if item.pybroker_only}
    assert {"remotingWorkers", "frameMaxBytes", "extFieldsMax"} <= own
    assert not own & {"listenPort", "flushDiskType", "serverWorkerThreads"}


def test_areas_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.load_broker_config().broker.listen_port = 1


def test_important_settings_are_a_subset_of_all():
    loaded = config.load_broker_config(GOLDEN)
    everything = config.all_settings(loaded)
    important = config.important_settings(loaded)
    assert set(important) < set(everything)
    assert ("brokerName", "broker-a") in important and ("flushDiskType", "ASYNC_FLUSH") in important
    assert ("checkCRCOnRecover", "true") in everything
    assert ("checkCRCOnRecover", "true") not in important


def test_printed_settings_load_back_to_the_same_config(tmp_path):
    loaded = config.load_broker_config(GOLDEN)
    text = "\n".join(config.properties_line(key, value)
                     for key, value in config.all_settings(loaded))
    again = load_text(tmp_path, text)
    for area in ("broker", "store", "remoting", "derived"):
        assert getattr(again, area) == getattr(loaded, area), area
    assert again.unknown_keys == ()


def test_setting_declares_type_from_the_annotation():
    @dataclasses.dataclass(frozen=True)
    class Area:
        sample_ratio: float = config.setting("sampleRatio", 0.5, "a float setting",
                                             rule=config.between(0, 1))
        sample_size: int = config.setting("sampleSize", 1, "a long setting", unit="bytes",
                                          long=True)
    ratio, size = config.settings_of(Area)
    assert (ratio.kind, size.kind, size.unit) == ("float", "long", "bytes")
    assert config.parse_value(ratio, "0.25") == 0.25
    assert config.parse_value(ratio, "1e-1") == 0.1 and config.parse_value(ratio, "1.0f") == 1.0
    for bad in ("nan", "0x1p3", "1,5"):
        with pytest.raises(ConfigError, match=f"^sampleRatio={bad}: must be a decimal number"):
            config.parse_value(ratio, bad)
    with pytest.raises(ConfigError, match="^sampleRatio=2: must be between 0 and 1"):
        config.parse_value(ratio, "2")


def test_attribute_must_be_the_key_in_snake_case():
    @dataclasses.dataclass(frozen=True)
    class Area:
        listen_port_number: int = config.setting("listenPort", 1, "misnamed")
    with pytest.raises(AssertionError):
        config.settings_of(Area)
