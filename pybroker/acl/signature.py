# ACL 1.0 request signatures: the bytes a client signs, HMAC-SHA1, constant-time verification.
"""The request signature of RocketMQ's ACL 1.0 (reference: security-and-faults.md §3.3).

A client adds ``AccessKey`` (and ``SecurityToken`` when it has one) to the request's ext fields,
then signs: the values of every ext field except ``Signature``, in the order of their keys
(Java's ``TreeMap``: String order, i.e. UTF-16 code units), concatenated without separators and
encoded as UTF-8, followed by the raw body. ``Signature`` is Base64(HMAC-SHA1(secretKey, that)).

The server rebuilds the same bytes from the ext fields it received. For clients older than
4.9.4 (version <= V4_9_3) the ``_UNIQUE_KEY_QUERY`` field is left out, as the Java 5.x server
does: those clients add it after signing. Comparison is constant-time
(:func:`hmac.compare_digest`).
"""
import base64
import dataclasses
import hashlib
import hmac
from typing import Any, Callable, Mapping, Optional

from pybroker.config import inner_credentials
from pybroker.protocol.constants import MQVersion

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
_LAST_VERSION_WITHOUT_QUERY_FLAG = int(MQVersion.V4_9_3)


def _java_string_order(key: str) -> bytes:
    # Java compares Strings by UTF-16 code units; Python by code points. They differ only for
    # characters above U+FFFF against U+E000..U+FFFF, which big-endian UTF-16 orders like Java.
    return key.encode("utf-16-be", "surrogatepass")


def signed_content(ext_fields: Mapping[str, str], body, *,
                   skip_unique_query_flag: bool = False) -> bytes:
    """The bytes a signature covers: ext values (not ``Signature``) in key order, then body."""
    keys = sorted((key for key in ext_fields if key != SIGNATURE
                   and not (skip_unique_query_flag and key == UNIQUE_MSG_QUERY_FLAG)),
                  key=_java_string_order)
    content = "".join(ext_fields[key] for key in keys).encode("utf-8", "surrogatepass")
    if body:
        content += bytes(body)
    return content


def calculate_signature(content: bytes, secret_key: str) -> str:
    """Base64 of HMAC-SHA1 over ``content`` keyed by ``secret_key`` (UTF-8), as Java's
    ``AclSigner.calSignature``."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def sign_request(ext_fields: dict, body, access_key: str, secret_key: str,
                 security_token: Optional[str] = None) -> None:
    """Sign a request the way Java's ``AclClientRPCHook`` does, in place: add ``AccessKey``
    (and ``SecurityToken``), then ``Signature`` over the result."""
    ext_fields[ACCESS_KEY] = access_key
    if security_token is not None:
        ext_fields[SECURITY_TOKEN] = security_token
    ext_fields.pop(SIGNATURE, None)
    ext_fields[SIGNATURE] = calculate_signature(signed_content(ext_fields, body), secret_key)


def signature_matches(ext_fields: Mapping[str, str], body, version: int,
                      secret_key: str) -> bool:
    """True when the request's ``Signature`` is the one ``secret_key`` gives its content.

    The comparison takes the same time wherever the strings differ.
    """
    received = ext_fields.get(SIGNATURE)
    if received is None:
        return False
    content = signed_content(ext_fields, body,
                             skip_unique_query_flag=version <= _LAST_VERSION_WITHOUT_QUERY_FLAG)
    expected = calculate_signature(content, secret_key)
    return hmac.compare_digest(expected.encode("ascii"), received.encode("utf-8",
                                                                         "surrogatepass"))


@dataclasses.dataclass(frozen=True)
class Credentials:
    """An ACL account for clients (``ClientInstance(credentials=...)``, ``pybroker admin``):
    :meth:`sign` is the remoting client's signer. The secret is not in repr."""
    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    security_token: Optional[str] = dataclasses.field(default=None, repr=False)

    def sign(self, request: Any) -> None:
        """Sign ``request`` (a RemotingCommand) in place, as Java's AclClientRPCHook."""
        if request.ext_fields is None:
            request.ext_fields = {}
        sign_request(request.ext_fields, request.body, self.access_key, self.secret_key,
                     self.security_token)


def inner_signer(config) -> Optional[Callable[[Any], None]]:
    """The signer of a broker's own requests (NameServer registration, a slave's sync with its
    master) when ``innerClientAuthenticationCredentials`` names an account, else None."""
    pair = inner_credentials(config.broker.inner_client_authentication_credentials)
    return None if pair is None else Credentials(*pair).sign
