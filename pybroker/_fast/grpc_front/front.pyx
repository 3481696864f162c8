# distutils: language = c++
# pybroker._fast.grpc_front.front: start and stop the libgrpc++ relay of the gRPC worker.
"""The Python face of the gRPC front (relay.h): :class:`Front` binds the public listeners and
relays every call to ``backend`` (the worker's grpcio service) on its own thread; ``stop``
blocks without the GIL until the calls in flight are ended.
"""
from libc.stdint cimport uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.vector cimport vector

cdef extern from "relay.h" namespace "pybroker_front" nogil:
    const char* kPeerKey
    cppclass Config:
        vector[string] plain_addresses
        vector[string] tls_addresses
        string backend
        string certificate_chain
        string private_key
        string trusted
        cbool require_client_auth
        int max_message_bytes
    cppclass CFront "pybroker_front::Front":
        pass
    CFront* Start(const Config& config, string* error)
    void Stop(CFront* front, double grace_s)
    uint64_t CallsAccepted(const CFront* front)

PEER_KEY = kPeerKey.decode()


cdef class Front:
    """A started front; ``stop`` it once (the worker does at its stop)."""
    cdef CFront* _front

    def __cinit__(self, plain_addresses, tls_addresses, str backend, *,
                  bytes certificate_chain=b"", bytes private_key=b"", bytes trusted=b"",
                  bint require_client_auth=False, int max_message_bytes=4 << 20):
        cdef Config config
        cdef string error
        for address in plain_addresses:
            config.plain_addresses.push_back(address.encode())
        for address in tls_addresses:
            config.tls_addresses.push_back(address.encode())
        config.backend = backend.encode()
        config.certificate_chain = certificate_chain
        config.private_key = private_key
        config.trusted = trusted
        config.require_client_auth = require_client_auth
        config.max_message_bytes = max_message_bytes
        with nogil:
            self._front = Start(config, &error)
        if self._front == NULL:
            raise OSError(error.decode())

    @property
    def calls_accepted(self) -> int:
        if self._front == NULL:
            return 0
        return CallsAccepted(self._front)

    def stop(self, double grace_s) -> None:
        """Stop accepting; end the calls in flight after ``grace_s`` seconds; join."""
        cdef CFront* front = self._front
        self._front = NULL
        if front != NULL:
            with nogil:
                Stop(front, grace_s)

    def __dealloc__(self):
        if self._front != NULL:
            with nogil:
                Stop(self._front, 0.0)
