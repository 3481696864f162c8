# The shared-secret challenge of pybroker HA pairs (haSharedSecret): byte layouts and MACs.
"""A pybroker slave and master that share ``haSharedSecret`` prove it to each other when the
slave connects, before the classic HA protocol (:mod:`pybroker.protocol.ha`) starts::

    slave -> master: hello     off 0  size 8   HELLO_MAGIC
                               off 8  size 32  slave nonce (random)
    master -> slave: challenge off 0  size 8   HELLO_MAGIC
                               off 8  size 32  master nonce (random)
                               off 40 size 32  HMAC-SHA256(secret, "master" | slave nonce |
                                               master nonce)
    slave -> master: proof     off 0  size 32  HMAC-SHA256(secret, "slave" | slave nonce |
                                               master nonce)

Each side proves the secret over a nonce the other just chose, so neither message can be
replayed on another connection, and the two MACs differ by their role label, so one cannot be
reflected as the other. The magic read as a report is a negative offset: a master that does
not know the challenge (Java's) closes the connection instead of serving it. This is not a
pybroker extension Java has; Java slaves are admitted by address instead (docs/security.md).
"""
import hashlib
import hmac

HELLO_MAGIC = b"\xffPBHA-1\x00"
NONCE_BYTES = 32
MAC_BYTES = 32
HELLO_BYTES = len(HELLO_MAGIC) + NONCE_BYTES
CHALLENGE_BYTES = len(HELLO_MAGIC) + NONCE_BYTES + MAC_BYTES
PROOF_BYTES = MAC_BYTES
assert len(HELLO_MAGIC) == 8 and HELLO_MAGIC[0] & 0x80, "a negative offset as a report"
assert hashlib.sha256().digest_size == MAC_BYTES

_MASTER = b"master"
_SLAVE = b"slave"


class HAAuthError(Exception):
    """The peer does not know the secret (or does not speak the challenge)."""


def mac(secret: bytes, role: bytes, slave_nonce: bytes, master_nonce: bytes) -> bytes:
    return hmac.new(secret, role + slave_nonce + master_nonce, hashlib.sha256).digest()


def encode_hello(slave_nonce: bytes) -> bytes:
    if len(slave_nonce) != NONCE_BYTES:
        raise ValueError(f"a nonce has {NONCE_BYTES} bytes, not {len(slave_nonce)}")
    return HELLO_MAGIC + slave_nonce


def parse_hello(data: bytes) -> bytes:
    """The slave nonce of a hello; HAAuthError when ``data`` is not one."""
    if len(data) != HELLO_BYTES or not data.startswith(HELLO_MAGIC):
        raise HAAuthError("the peer did not open with the haSharedSecret challenge (a slave "
                          "without haSharedSecret, or not a pybroker slave)")
    return data[len(HELLO_MAGIC):]


def encode_challenge(secret: bytes, slave_nonce: bytes, master_nonce: bytes) -> bytes:
    return HELLO_MAGIC + master_nonce + mac(secret, _MASTER, slave_nonce, master_nonce)


def check_challenge(secret: bytes, slave_nonce: bytes, data: bytes) -> bytes:
    """The master nonce of a challenge whose MAC proves the secret; HAAuthError otherwise."""
    if len(data) != CHALLENGE_BYTES or not data.startswith(HELLO_MAGIC):
        raise HAAuthError("the master did not answer the haSharedSecret challenge (a master "
                          "without haSharedSecret, or not a pybroker master)")
    master_nonce = data[len(HELLO_MAGIC):len(HELLO_MAGIC) + NONCE_BYTES]
    if not hmac.compare_digest(data[len(HELLO_MAGIC) + NONCE_BYTES:],
                               mac(secret, _MASTER, slave_nonce, master_nonce)):
        raise HAAuthError("the master's proof of haSharedSecret is wrong (another secret)")
    return master_nonce


def encode_proof(secret: bytes, slave_nonce: bytes, master_nonce: bytes) -> bytes:
    return mac(secret, _SLAVE, slave_nonce, master_nonce)


def check_proof(secret: bytes, slave_nonce: bytes, master_nonce: bytes, data: bytes) -> None:
    if not hmac.compare_digest(data, mac(secret, _SLAVE, slave_nonce, master_nonce)):
        raise HAAuthError("the slave's proof of haSharedSecret is wrong (another secret)")
