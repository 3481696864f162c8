// The gRPC front's relay (C++, libgrpc++): every call on the public listeners is relayed to the
// worker's grpcio service on a private socket, with the caller's address as metadata.
#ifndef PYBROKER_GRPC_FRONT_RELAY_H
#define PYBROKER_GRPC_FRONT_RELAY_H

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "send.h"

namespace pybroker_front {

// Metadata key carrying the public caller's grpc peer string (ipv4:host:port) to the backend;
// the front replaces any value a client sent under it.
extern const char* const kPeerKey;

struct Config {
    std::vector<std::string> plain_addresses;   // grpc addresses served in plaintext
    std::vector<std::string> tls_addresses;     // grpc addresses served with TLS
    std::string backend;                        // the grpcio service's private address
    std::string certificate_chain;              // PEM, for tls_addresses
    std::string private_key;                    // PEM, unencrypted
    std::string trusted;                        // PEM roots for client certificates, or empty
    bool require_client_auth = false;
    int max_message_bytes = 4 << 20;
    // Unary methods (full paths) handed to the worker instead of relayed: their requests wait
    // in the front's hand-off list, signalled on handoff_eventfd (the worker's), until
    // Answer is called with their handle.
    std::vector<std::string> handoff_methods;
    int handoff_eventfd = -1;
    // SendMessage calls the front puts itself (send.h, once SetSendRules gave it rules): their
    // remoting frames wait in the send list, signalled on handoff_eventfd too, until the
    // worker has put them on its send ring (TakeSends) and AnswerSend answers each; a frame
    // the ring's fast path does not take goes back to the hand-off (TakeFallback).
    bool fast_sends = false;
    // Server-streaming methods (full paths) handed to the worker too: the request waits in the
    // stream list (TakeStreams) with the call's deadline; the worker answers with every
    // response of the stream at once (AnswerStream), which the front writes one by one and
    // reports how many it wrote (TakeReports); a call the client cancels before its answer is
    // reported at once (TakeCancelled). Signalled on handoff_eventfd.
    std::vector<std::string> stream_methods;
};

// One handed-off call: its request message and what the service needs of its context.
struct Handoff {
    std::uintptr_t handle;
    std::string method;
    std::string request;
    std::vector<std::pair<std::string, std::string>> metadata;
    std::string peer;
    // Streamed calls (stream_methods) only: the call's number, unique in the front (the
    // cancel and the report name it), and its deadline in seconds of the wall clock
    // (negative: none).
    std::uint64_t id = 0;
    double deadline = -1;
};

// How many of a streamed call's responses the front wrote (a prefix of them).
struct StreamReport {
    std::uint64_t id;
    int written;
};

// The fast sends of one caller (its grpc peer string) waiting: their frames one after the other.
struct PeerSends {
    std::string peer;
    std::string frames;
    int count = 0;
};

class Front;

// Starts the front (listeners bound, one completion-queue thread relaying); nullptr and
// *error set when a listener cannot be bound.
Front* Start(const Config& config, std::string* error);
// Stops accepting; the calls in flight still get their answers (Answer, AnswerSend) for up
// to grace_s, then those left are ended (cancelled); later answers are dropped; joins the
// thread. Blocking: call without the GIL. The front stays allocated until Destroy.
void Stop(Front* front, double grace_s);
// Frees a stopped front (no Answer or AnswerSend may run on it any more).
void Destroy(Front* front);
// Calls accepted so far, and how many of them were handed off.
std::uint64_t CallsAccepted(const Front* front);
std::uint64_t CallsHandedOff(const Front* front);
// Moves the handed-off calls waiting into *out (the caller has read the eventfd first).
void TakeHandoffs(Front* front, std::vector<Handoff>* out);
// Replaces the rules of the sends the front puts itself. Thread-safe.
void SetSendRules(Front* front, std::shared_ptr<const SendRules> rules);
// Calls accepted as fast sends so far.
std::uint64_t CallsSentFast(const Front* front);
// Moves the fast sends waiting into *out, one entry per caller (after reading the eventfd).
void TakeSends(Front* front, std::vector<PeerSends>* out);
// The hand-off of fast send `opaque`, whose frame the send ring's fast path did not take: true
// with *out set (the worker answers it as a handed-off call), false when no such send waits.
bool TakeFallback(Front* front, std::int32_t opaque, Handoff* out);
// The fast path's answer to fast send `opaque`: the front answers SUCCESS and the entry codes
// itself (returns 0, as for an opaque no send waits under); for any other code it returns the
// call's handle, which the worker answers with Answer.
std::uintptr_t AnswerSend(Front* front, std::int32_t opaque, int code,
                          std::int64_t queue_offset, const std::string& recall_handle);
// Moves the streamed calls waiting into *out (after reading the eventfd).
void TakeStreams(Front* front, std::vector<Handoff>* out);
// Moves the ids of the streamed calls their clients cancelled (or whose deadline passed)
// before the worker answered them into *out.
void TakeCancelled(Front* front, std::vector<std::uint64_t>* out);
// Moves the reports of the streams answered with `report` into *out.
void TakeReports(Front* front, std::vector<StreamReport>* out);
// Answers a streamed call, exactly once per handle (or Answer with a status other than 0):
// its responses are written one by one and the stream ends with status OK; with `report`,
// how many were written comes back (TakeReports) once the stream has ended or a write failed.
// Thread-safe.
void AnswerStream(Front* front, std::uintptr_t handle, std::vector<std::string> responses,
                  bool report);
// Answers a handed-off call, exactly once per handle: status code 0 with the response
// message, or another code with its details. Thread-safe.
void Answer(Front* front, std::uintptr_t handle, const std::string& response, int code,
            const std::string& details);

}  // namespace pybroker_front

#endif
