# Settings honesty: every broker.conf key pybroker accepts but does not act on is declared.
"""Goal: no setting loads silently as if it were in effect. Method: every schema key whose
Python attribute no module outside config.py reads must be listed in SETTINGS_NOT_ACTED_ON
(or be refused by its rule unless it has Java's default); `pybroker config` prints the list
and a broker.conf that sets such a key gets a warning."""
import dataclasses
import logging
import pathlib
import re

from pybroker import cli, config

ROOT = pathlib.Path(__file__).resolve().parents[2] / "pybroker"
_AREAS = (config.BrokerConfig, config.StoreConfig, config.RemotingConfig, config.TlsConfig,
          config.GrpcConfig)


# Where areas are declared: a field's own declaration line is not a read of it.
_DECLARATION = re.compile(r"^    \w+: [^=]+ = setting\(.*$", re.MULTILINE)


def _sources() -> str:
    # config.py counts too: its derivations act on keys (brokerIP2 -> haServerAddr,
    # haSlaveFallbehindMax -> haMaxGapNotInSync); the declaration lines are dropped.
    return "\n".join(_DECLARATION.sub("", path.read_text(encoding="utf-8"))
                     for path in ROOT.rglob("*.py*") if path.suffix in (".py", ".pyx"))


def test_every_key_read_nowhere_is_declared_not_acted_on():
    text = _sources()
    silent = []
    for area in _AREAS:
        for field in dataclasses.fields(area):
            key = field.metadata["key"]
            refused = field.metadata.get("rule") is not None and \
                type(field.metadata["rule"]).__name__ == "Rule" and \
                "pybroker" in field.metadata["rule"].text
            if not re.search(rf"\b{field.name}\b", text) and not refused \
                    and key not in config.SETTINGS_NOT_ACTED_ON:
                silent.append(key)
    assert silent == []


def test_declared_keys_exist_and_are_really_unread():
    keys = {field.metadata["key"]: field.name for area in _AREAS
            for field in dataclasses.fields(area)}
    text = _sources()
    for key in config.SETTINGS_NOT_ACTED_ON:
        assert key in keys, key
        assert not re.search(rf"\b{keys[key]}\b", text), f"{key} is read: drop it from the list"


def test_config_lists_them_and_loading_warns(tmp_path, capsys, caplog):
    conf = tmp_path / "broker.conf"
    conf.write_text("flushCommitLogTimed=false\nbrokerName=b\n")
    with caplog.at_level(logging.WARNING, logger="pybroker.config"):
        assert cli.main(["config", "-c", str(conf)]) == 0
    out = capsys.readouterr().out
    for key in config.SETTINGS_NOT_ACTED_ON:
        assert f"# {key}: accepted, not acted on:" in out
    assert "flushCommitLogTimed=false is accepted but not acted on" in caplog.text
