// The gRPC front's relay (C++, libgrpc++): every call on the public listeners is relayed to the
// worker's grpcio service on a private socket, with the caller's address as metadata.
#ifndef PYBROKER_GRPC_FRONT_RELAY_H
#define PYBROKER_GRPC_FRONT_RELAY_H

#include <cstdint>
#include <string>
#include <vector>

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
};

class Front;

// Starts the front (listeners bound, one completion-queue thread relaying); nullptr and
// *error set when a listener cannot be bound.
Front* Start(const Config& config, std::string* error);
// Stops accepting, ends the calls in flight after grace_s (cancelled), joins the thread and
// frees the front. Blocking: call without the GIL.
void Stop(Front* front, double grace_s);
// Calls accepted so far.
std::uint64_t CallsAccepted(const Front* front);

}  // namespace pybroker_front

#endif
