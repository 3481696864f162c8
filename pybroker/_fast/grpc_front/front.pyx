# distutils: language = c++
# pybroker._fast.grpc_front.front: start and stop the libgrpc++ relay of the gRPC worker.
"""The Python face of the gRPC front (relay.h): :class:`Front` binds the public listeners and
relays every call to ``backend`` (the worker's grpcio service) on its own thread, but the
unary ``handoff_methods``, which wait for the worker: ``take`` them when ``handoff_eventfd``
is readable (after reading it) and ``answer`` each once. ``stop`` blocks without the GIL: it
stops accepting, lets the calls in flight end for ``grace_s`` (so the worker must go on
answering meanwhile), then ends the others.
"""
PEER_KEY = kPeerKey.decode()


cdef class Front:
    """A started front; ``stop`` it once (the worker does at its stop)."""

    def __cinit__(self, plain_addresses, tls_addresses, str backend, *,
                  bytes certificate_chain=b"", bytes private_key=b"", bytes trusted=b"",
                  bint require_client_auth=False, int max_message_bytes=4 << 20,
                  handoff_methods=(), int handoff_eventfd=-1):
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
        for method in handoff_methods:
            config.handoff_methods.push_back(method.encode())
        config.handoff_eventfd = handoff_eventfd
        with nogil:
            self._front = Start(config, &error)
        if self._front == NULL:
            raise OSError(error.decode())

    @property
    def calls_accepted(self) -> int:
        if self._front == NULL:
            return 0
        return CallsAccepted(self._front)

    @property
    def calls_handed_off(self) -> int:
        if self._front == NULL:
            return 0
        return CallsHandedOff(self._front)

    def take(self) -> list:
        """The handed-off calls waiting: (handle, method, request, metadata, peer) each,
        metadata as (key, value) pairs (bytes values for ``-bin`` keys, as grpcio gives)."""
        cdef vector[Handoff] calls
        if self._front == NULL:
            return []
        TakeHandoffs(self._front, &calls)
        taken = []
        for call in calls:
            metadata = []
            for entry in call.metadata:
                key = entry.first.decode()
                value = entry.second if key.endswith("-bin") else entry.second.decode()
                metadata.append((key, value))
            taken.append((call.handle, call.method.decode(), call.request, tuple(metadata),
                          call.peer.decode()))
        return taken

    def answer(self, uintptr_t handle, bytes response, int code=0, str details="") -> None:
        """Answer a taken call once: ``code`` 0 with ``response``, else that status. After
        ``stop`` an answer is dropped: the stop ended the call (its relay object stays
        allocated until the process ends)."""
        if self._front != NULL:
            Answer(self._front, handle, response, code, details.encode())

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
