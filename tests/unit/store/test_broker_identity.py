"""The controller-assigned broker id files read and write Java 5.3.3's format.

Method: the ``brokerIdentity`` captured from a Java 5.3.3 broker is read and written back byte
for byte in tmp_path; the temp file of an application round-trips with its register check code;
the resume state follows the files present (identity wins over the temp file, nothing = start
over) and unreadable content counts as absent.
"""
import pathlib

from pybroker.store.broker_identity import (BrokerIdentity, RegisterState, clear_application,
                                            read_identity, register_state, temp_path,
                                            write_application, write_identity)

GOLDEN = pathlib.Path(__file__).parents[2] / "golden" / "java-5.3.3" / "controller"


def test_java_identity_round_trip(tmp_path):
    data = (GOLDEN / "brokerIdentity").read_bytes()
    path = tmp_path / "brokerIdentity"
    path.write_bytes(data)
    identity = read_identity(str(path))
    assert identity == BrokerIdentity("DefaultCluster", "broker-a", 2)
    path.unlink()
    write_identity(str(path), identity)
    assert path.read_bytes() == data


def test_register_states(tmp_path):
    path = str(tmp_path / "brokerIdentity")
    assert register_state(path) == (RegisterState.INITIAL, None)
    application = BrokerIdentity("C", "b", 3, "127.0.0.1:10911;1796473582699")
    write_application(path, application)
    assert pathlib.Path(temp_path(path)).read_text() == "C#b#3#127.0.0.1:10911;1796473582699"
    assert register_state(path) == (RegisterState.CREATE_TEMP_METADATA_FILE_DONE, application)
    write_identity(path, BrokerIdentity("C", "b", 3))
    assert register_state(path) == (RegisterState.CREATE_METADATA_FILE_DONE,
                                     BrokerIdentity("C", "b", 3))
    clear_application(path)
    assert not pathlib.Path(temp_path(path)).exists()


def test_unreadable_identity_is_absent(tmp_path):
    path = tmp_path / "brokerIdentity"
    for text in ("", "only#two", "C#b#notanumber"):
        path.write_text(text)
        assert read_identity(str(path)) is None
