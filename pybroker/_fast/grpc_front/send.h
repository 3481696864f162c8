// The gRPC front's SendMessage: a request the front can put itself becomes the remoting
// SEND_MESSAGE frame the Python servicer would build for it (grpc_service/producer.py), for the
// worker's send fast path (_fast/send/); the fast path's answer becomes the SendMessageResponse.
#ifndef PYBROKER_GRPC_FRONT_SEND_H
#define PYBROKER_GRPC_FRONT_SEND_H

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace pybroker_front {

// Property names of a stored message, in the order SendRules.property_names lists them.
enum PropertyName {
    kTags, kKeys, kUniqKey, kTimerDeliverMs, kReconsumeTime, kProducerGroup, kShardingKey,
    kTraceContext, kBornHost, kBornTimestamp, kPropertyNames
};

// A topic the front may send to: its writable queues and the message types it takes.
struct SendTopic {
    int queues = 0;
    bool normal = false;        // a message without a group
    bool fifo = false;          // a message with a message group
    bool delay = false;         // a message with a delivery time
};

// What the worker publishes for the sends the front may take (grpc_service/front_send.py
// send_rules, from the Python path's own rules and constants); a send outside them is handed
// to the servicer.
struct SendRules {
    std::unordered_map<std::string, SendTopic> topics;
    std::unordered_set<std::string> system_property_names;  // no user property may use one
    std::vector<std::string> property_names;                // PropertyName order
    std::string client_id_key;                              // the SDK's client id header
    std::int64_t max_message_size = 0;
    bool body_empty_check = true;
    int user_property_max_num = 0;
    int max_user_property_size = 0;
    int max_message_group_size = 0;
    std::int64_t max_delay_ms = 0;                          // maxDelayTimeMills
    int compressed_flag = 0;                                // sysFlag of a GZIP body
    std::int32_t send_message_code = 10;                    // RequestCode.SEND_MESSAGE
    // Remoting answer code -> (gRPC code, message) of the answers that are a result entry
    // with that status (SUCCESS: the code of OK, message ignored).
    std::unordered_map<int, std::pair<int, std::string>> entry_codes;
    std::int32_t success_code = 0;
};

// Round robin over a topic's write queues, as the servicer's QueueSelector (one turn counter per
// topic, from 0), for messages without a group; used on the front's thread only.
using QueueTurns = std::unordered_map<std::string, std::uint64_t>;

// A send the front puts itself: its remoting frame and the message id it answers.
struct SendFrame {
    std::string frame;
    std::string message_id;
};

// The frame of SendMessageRequest `request` (serialized) from a client whose metadata carries
// `client_id`, with `opaque`: true with *out filled when the front may put it (one message of a
// topic in rules taking its type, every check of the servicer passing without doubt: printable
// ASCII text, no transaction, a delivery time a second or more within the limit); false hands
// the call to the servicer.
bool BuildSendFrame(const std::string& request, const std::string& client_id,
                    const SendRules& rules, QueueTurns* turns, std::int32_t opaque,
                    SendFrame* out);

// The serialized SendMessageResponse of a fast send answered with `remoting_code`: true for
// SUCCESS and the entry codes of rules; false for any other code (the worker answers it).
// The queue of a message group among `buckets` write queues, as the servicer picks it
// (producer.py: Guava's consistentHash of the group's Java String.hashCode); printable ASCII.
int GroupQueue(const std::string& group, int buckets);

bool SendAnswer(const SendRules& rules, int remoting_code, const std::string& message_id,
                std::int64_t queue_offset, const std::string& recall_handle, std::string* out);

}  // namespace pybroker_front

#endif
