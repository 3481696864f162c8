# Contract of pybroker._fast.grpc_front.front: the libgrpc++ relay's C++ interface (relay.h)
# and the Front that holds one (what Python sees is front.pyi).
from libc.stdint cimport uint64_t, uintptr_t
from libcpp cimport bool as cbool
from libcpp.pair cimport pair
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
        vector[string] handoff_methods
        int handoff_eventfd
    cppclass Handoff:
        uintptr_t handle
        string method
        string request
        vector[pair[string, string]] metadata
        string peer
    cppclass CFront "pybroker_front::Front":
        pass
    CFront* Start(const Config& config, string* error)
    void Stop(CFront* front, double grace_s)
    uint64_t CallsAccepted(const CFront* front)
    uint64_t CallsHandedOff(const CFront* front)
    void TakeHandoffs(CFront* front, vector[Handoff]* out)
    void Answer(CFront* front, uintptr_t handle, const string& response, int code,
                const string& details)


cdef class Front:
    cdef CFront* _front
