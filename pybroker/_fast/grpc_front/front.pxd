# Contract of pybroker._fast.grpc_front.front: the libgrpc++ relay's C++ interface (relay.h)
# and the Front that holds one (what Python sees is front.pyi).
from libc.stdint cimport int32_t, int64_t, uint64_t, uintptr_t
from libcpp cimport bool as cbool
from libcpp.memory cimport shared_ptr
from libcpp.pair cimport pair
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.unordered_set cimport unordered_set
from libcpp.vector cimport vector

cdef extern from "send.h" namespace "pybroker_front" nogil:
    cppclass SendTopic:
        int queues
        cbool normal
        cbool fifo
        cbool delay
    cppclass SendRules:
        unordered_map[string, SendTopic] topics
        unordered_set[string] system_property_names
        vector[string] property_names
        string client_id_key
        int64_t max_message_size
        cbool body_empty_check
        int user_property_max_num
        int max_user_property_size
        int max_message_group_size
        int64_t max_delay_ms
        int compressed_flag
        int32_t send_message_code
        unordered_map[int, pair[int, string]] entry_codes
        int32_t success_code

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
        cbool fast_sends
        vector[string] stream_methods
    cppclass Handoff:
        uintptr_t handle
        string method
        string request
        vector[pair[string, string]] metadata
        string peer
        uint64_t id
        double deadline
    cppclass StreamReport:
        uint64_t id
        int written
    cppclass PeerSends:
        string peer
        string frames
        int count
    cppclass CFront "pybroker_front::Front":
        pass
    CFront* Start(const Config& config, string* error)
    void Stop(CFront* front, double grace_s)
    void Destroy(CFront* front)
    uint64_t CallsAccepted(const CFront* front)
    uint64_t CallsHandedOff(const CFront* front)
    void TakeHandoffs(CFront* front, vector[Handoff]* out)
    void Answer(CFront* front, uintptr_t handle, const string& response, int code,
                const string& details)
    void TakeStreams(CFront* front, vector[Handoff]* out)
    void TakeCancelled(CFront* front, vector[uint64_t]* out)
    void TakeReports(CFront* front, vector[StreamReport]* out)
    void AnswerStream(CFront* front, uintptr_t handle, vector[string] responses, cbool report)
    void SetSendRules(CFront* front, shared_ptr[SendRules] rules)
    uint64_t CallsSentFast(const CFront* front)
    void TakeSends(CFront* front, vector[PeerSends]* out)
    cbool TakeFallback(CFront* front, int32_t opaque, Handoff* out)
    uintptr_t AnswerSend(CFront* front, int32_t opaque, int code, int64_t queue_offset,
                         const string& recall_handle)


cdef class Front:
    cdef CFront* _front
