"""The Python client's first-hour errors name the thing, the value and the fix (issue #30).

Method: the blocking producer, as docs/client.md starts it, pointed at a NameServer address
where nothing listens (a port just found free), at a host name that cannot resolve (the
reserved .invalid domain), and given a body over max_message_size. Each must raise the typed
error (still a builtin ConnectionError / ValueError for code that catches those) whose one-line
text names the address or limit and the fix. A broker port given as NameServer is checked
against a real broker in tests/broker/test_first_hour_errors.py.
"""
import pytest

from pybroker._testbase.cluster import free_port
from pybroker.client import Message
from pybroker.client.errors import MessageTooLargeError, NameServerUnreachableError
from pybroker.client.sync import Producer


def _send(namesrv_addr: str, body: bytes, **options):
    producer = Producer("first_hour_producer", namesrv_addr, **options)
    producer.start()
    try:
        return producer.send(Message("TopicTest", body))
    finally:
        producer.shutdown()


def test_nothing_listens_at_the_name_server_address():
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(NameServerUnreachableError) as caught:
        _send(address, b"hello")
    assert isinstance(caught.value, ConnectionError)
    text = str(caught.value)
    assert "\n" not in text
    assert text == (f"no NameServer reachable at {address} (connection refused: nothing "
                    f"listens on that port): start one (pybroker standalone serves one on "
                    f"127.0.0.1:9876) or correct namesrv_addr")


def test_every_name_server_is_named():
    first, second = f"127.0.0.1:{free_port()}", "no-such-host.invalid:9876"
    with pytest.raises(NameServerUnreachableError) as caught:
        _send(f"{first};{second}", b"hello")
    text = str(caught.value)
    assert f"at {first} (connection refused" in text
    assert f"; {second} (host 'no-such-host.invalid' is not known: " in text
    assert [address for address, _ in caught.value.failures] == [first, second]


def test_body_over_max_message_size():
    with pytest.raises(MessageTooLargeError) as caught:
        _send(f"127.0.0.1:{free_port()}", b"x" * (5 << 20))
    assert isinstance(caught.value, ValueError)
    assert (caught.value.size, caught.value.size_max) == (5 << 20, 4 << 20)
    assert str(caught.value) == (
        "the message body is 5242880 bytes, over the producer's max_message_size=4194304 "
        "(the broker refuses bodies over its maxMessageSize, 4194304 by default): send less, "
        "or raise maxMessageSize in broker.conf and Producer(max_message_size=...) together")


def test_batch_over_max_message_size():
    producer = Producer("first_hour_producer", f"127.0.0.1:{free_port()}",
                        max_message_size=1000)
    producer.start()
    try:
        with pytest.raises(MessageTooLargeError, match=r"^the batch is \d+ bytes, over the "
                                                        r"producer's max_message_size=1000 "):
            producer.send_batch([Message("TopicTest", b"x" * 600) for _ in range(2)])
    finally:
        producer.shutdown()
