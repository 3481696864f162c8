// The gRPC front's SendMessage (send.h): the request decoded with protoc's classes of the vendored
// protos, the servicer's checks (grpc_service/messages.py outgoing, producer.py send_message) as
// "passes without doubt or hand it off", the queue the servicer would pick, the remoting
// SEND_MESSAGE frame (ROCKETMQ binary header) it would build, and the answer it would give.
#include "send.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "apache/rocketmq/v2/definition.pb.h"
#include "apache/rocketmq/v2/service.pb.h"

namespace pybroker_front {

namespace v2 = apache::rocketmq::v2;

namespace {

constexpr char kNameValueSeparator = '\x01';    // protocol/properties.py
constexpr char kPropertySeparator = '\x02';
constexpr std::int64_t kMillisPerSecond = 1000;
constexpr std::int32_t kNanosPerMilli = 1000000;
constexpr std::int32_t kNanosPerSecond = 1000000000;
// The servicer's fixed header values (producer.py _send_request).
constexpr char kDefaultTopic[] = "TBW102";
constexpr char kDefaultTopicQueueNums[] = "4";
constexpr std::uint8_t kSerializeRocketmq = 1;   // frame.pxd SERIALIZE_TYPE_ROCKETMQ
// A delivery time this close to maxDelayTimeMills is the servicer's to judge (its clock, later).
constexpr std::int64_t kDelayLimitMarginMs = 1000;

std::int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch()).count();
}

// Timestamp.ToMilliseconds of a valid timestamp; false for nanos out of range.
bool Milliseconds(const google::protobuf::Timestamp& at, std::int64_t* out) {
    if (at.nanos() < 0 || at.nanos() >= kNanosPerSecond) return false;
    *out = at.seconds() * kMillisPerSecond + at.nanos() / kNanosPerMilli;
    return true;
}

// Text the servicer takes as it is and the fast path stores as it is: printable ASCII only (a
// control character is a refusal, non-ASCII text the Python path's to judge).
bool Printable(const std::string& text) {
    for (unsigned char c : text) {
        if (c < 0x20 || c > 0x7e) return false;
    }
    return true;
}

// Printable ASCII text that is not blank (StringUtils.isBlank: spaces only, once printable).
bool PrintableWord(const std::string& text) {
    return Printable(text) && text.find_first_not_of(' ') != std::string::npos;
}

void PackInt16(std::string* out, std::int16_t value) {
    const auto bits = static_cast<std::uint16_t>(value);
    out->push_back(static_cast<char>(bits >> 8));
    out->push_back(static_cast<char>(bits & 0xff));
}

void PackInt32(std::string* out, std::int32_t value) {
    const auto bits = static_cast<std::uint32_t>(value);
    for (int shift = 24; shift >= 0; shift -= 8) {
        out->push_back(static_cast<char>((bits >> shift) & 0xff));
    }
}

void PutInt32At(std::string* out, std::size_t at, std::int32_t value) {
    const auto bits = static_cast<std::uint32_t>(value);
    for (int index = 0; index < 4; ++index) {
        (*out)[at + index] = static_cast<char>((bits >> (24 - 8 * index)) & 0xff);
    }
}

void ExtField(std::string* out, const char* key, const std::string& value) {
    const std::size_t length = std::strlen(key);
    PackInt16(out, static_cast<std::int16_t>(length));
    out->append(key, length);
    PackInt32(out, static_cast<std::int32_t>(value.size()));
    out->append(value);
}

void Property(std::string* out, const std::string& name, const std::string& value) {
    out->append(name);
    out->push_back(kNameValueSeparator);
    out->append(value);
    out->push_back(kPropertySeparator);
}

// The stored properties of `message` (messages.py outgoing, in its order, user properties
// sorted by name), or false when a check of the servicer might refuse it.
bool Properties(const v2::Message& message, const std::string& topic, const SendRules& rules,
                std::string* out) {
    const v2::SystemProperties& system = message.system_properties();
    const std::string& body = message.body();
    if (rules.body_empty_check && body.empty()) return false;
    if (rules.max_message_size > 0 &&
        static_cast<std::int64_t>(body.size()) > rules.max_message_size) {
        return false;
    }
    if (message.user_properties_size() > rules.user_property_max_num) return false;
    std::vector<std::pair<std::string, std::string>> user(message.user_properties().begin(),
                                                          message.user_properties().end());
    std::sort(user.begin(), user.end());
    std::size_t size = 0;
    for (const auto& [key, value] : user) {
        // An empty key or value is stored as the servicer stores it only if decoding keeps it:
        // left to the servicer.
        if (!Printable(key) || !Printable(value) || key.empty() || value.empty()) return false;
        if (rules.system_property_names.count(key) != 0) return false;
        size += key.size() + value.size();
    }
    const std::string& tag = system.tag();
    if (!tag.empty() && (!PrintableWord(tag) || tag.find('|') != std::string::npos)) {
        return false;
    }
    size += tag.size();
    std::string keys;
    for (int index = 0; index < system.keys_size(); ++index) {
        const std::string& key = system.keys(index);
        if (!key.empty() && !PrintableWord(key)) return false;
        if (index > 0) keys.push_back(' ');          // MessageConst.KEY_SEPARATOR
        keys.append(key);
        size += key.size();
    }
    if (static_cast<std::int64_t>(size) > rules.max_user_property_size) return false;
    if (!PrintableWord(system.message_id())) return false;
    if (system.message_type() == v2::TRANSACTION) return false;     // the servicer's
    std::string deliver;
    if (system.has_delivery_timestamp()) {
        std::int64_t deliver_ms;
        if (!Milliseconds(system.delivery_timestamp(), &deliver_ms)) return false;
        if (rules.max_delay_ms > 0 &&
            deliver_ms - NowMs() > rules.max_delay_ms - kDelayLimitMarginMs) {
            return false;
        }
        deliver = std::to_string(deliver_ms);
    }
    const std::string& group = system.message_group();
    if (!group.empty() && (!PrintableWord(group) ||
                           (rules.max_message_group_size > 0 &&
                            static_cast<int>(group.size()) >= rules.max_message_group_size))) {
        return false;
    }
    if (!Printable(system.trace_context())) return false;
    // The servicer takes the caller's address for a blank born host: the fast path's slot has
    // it as the record's BORNHOST, not as this property.
    std::int64_t born_ms;
    if (!PrintableWord(system.born_host()) || !system.has_born_timestamp() ||
        !Milliseconds(system.born_timestamp(), &born_ms)) {
        return false;
    }
    const std::vector<std::string>& names = rules.property_names;
    for (const auto& [key, value] : user) Property(out, key, value);
    if (!tag.empty()) Property(out, names[kTags], tag);
    if (system.keys_size() > 0) Property(out, names[kKeys], keys);
    Property(out, names[kUniqKey], system.message_id());
    if (!deliver.empty()) Property(out, names[kTimerDeliverMs], deliver);
    Property(out, names[kReconsumeTime], std::to_string(system.delivery_attempt()));
    Property(out, names[kProducerGroup], topic);
    if (!group.empty()) Property(out, names[kShardingKey], group);
    if (!system.trace_context().empty()) {
        Property(out, names[kTraceContext], system.trace_context());
    }
    Property(out, names[kBornHost], system.born_host());
    Property(out, names[kBornTimestamp], std::to_string(born_ms));
    return true;
}

}  // namespace

bool BuildSendFrame(const std::string& request, const std::string& client_id,
                    const SendRules& rules, QueueTurns* turns, std::int32_t opaque,
                    SendFrame* out) {
    if (!PrintableWord(client_id)) return false;   // CLIENT_ID_REQUIRED: the servicer's
    v2::SendMessageRequest parsed;
    if (!parsed.ParseFromString(request) || parsed.messages_size() != 1) return false;
    const v2::Message& message = parsed.messages(0);
    const std::string& topic = message.topic().name();
    if (!message.topic().resource_namespace().empty()) return false;
    const auto found = rules.topics.find(topic);
    if (found == rules.topics.end() || found->second.queues <= 0) return false;
    // TopicMessageType.parseFromMessageProperty: a delivery time first, then a group.
    const std::string& group = message.system_properties().message_group();
    const SendTopic& takes = found->second;
    if (!(message.system_properties().has_delivery_timestamp() ? takes.delay
          : group.empty() ? takes.normal : takes.fifo)) {
        return false;
    }
    std::string properties;
    if (!Properties(message, topic, rules, &properties)) return false;
    const auto& born = message.system_properties().born_timestamp();
    const std::int64_t born_ms = born.seconds() * kMillisPerSecond + born.nanos() / kNanosPerMilli;
    const int queues = found->second.queues;
    int queue_id;
    if (group.empty()) {
        const std::uint64_t turn = (*turns)[topic]++;
        queue_id = static_cast<int>(turn % static_cast<std::uint64_t>(queues));
    } else {
        queue_id = GroupQueue(group, queues);
    }
    const int sys_flag = message.system_properties().body_encoding() == v2::GZIP
                             ? rules.compressed_flag : 0;

    std::string& frame = out->frame;
    frame.clear();
    frame.reserve(128 + properties.size() + message.body().size() + 2 * topic.size());
    PackInt32(&frame, 0);                           // frame length, set below
    PackInt32(&frame, 0);                           // serialize type and header length
    PackInt16(&frame, static_cast<std::int16_t>(rules.send_message_code));
    frame.push_back(0);                             // language: not stored
    PackInt16(&frame, 0);                           // version: not stored
    PackInt32(&frame, opaque);
    PackInt32(&frame, 0);                           // flag: a request, answered
    PackInt32(&frame, 0);                           // no remark
    const std::size_t ext_at = frame.size();
    PackInt32(&frame, 0);                           // ext fields' length, set below
    ExtField(&frame, "producerGroup", topic);
    ExtField(&frame, "topic", topic);
    ExtField(&frame, "defaultTopic", kDefaultTopic);
    ExtField(&frame, "defaultTopicQueueNums", kDefaultTopicQueueNums);
    ExtField(&frame, "queueId", std::to_string(queue_id));
    ExtField(&frame, "sysFlag", std::to_string(sys_flag));
    ExtField(&frame, "bornTimestamp", std::to_string(born_ms));
    ExtField(&frame, "flag", "0");
    ExtField(&frame, "properties", properties);
    ExtField(&frame, "reconsumeTimes", "0");
    const std::size_t header_end = frame.size();
    PutInt32At(&frame, ext_at, static_cast<std::int32_t>(header_end - ext_at - 4));
    PutInt32At(&frame, 4, static_cast<std::int32_t>(
                              (static_cast<std::uint32_t>(kSerializeRocketmq) << 24) |
                              static_cast<std::uint32_t>(header_end - 8)));
    frame.append(message.body());
    PutInt32At(&frame, 0, static_cast<std::int32_t>(frame.size() - 4));
    out->message_id = message.system_properties().message_id();
    return true;
}

int GroupQueue(const std::string& group, int buckets) {
    std::int32_t hash = 0;                          // String.hashCode of ASCII text
    for (unsigned char c : group) {
        hash = static_cast<std::int32_t>(31u * static_cast<std::uint32_t>(hash) + c);
    }
    // Guava's Hashing.consistentHash(long, int): its linear congruential walk.
    std::uint64_t state = static_cast<std::uint64_t>(static_cast<std::int64_t>(hash));
    int candidate = 0;
    while (true) {
        state = 2862933555777941757ULL * state + 1;
        const double shifted = static_cast<double>((state >> 33) & 0x7FFFFFFF);
        const double next = (candidate + 1) / ((shifted + 1) / 2147483648.0);
        if (next >= 0 && next < buckets) {
            candidate = static_cast<int>(next);
        } else {
            return candidate;
        }
    }
}

bool SendAnswer(const SendRules& rules, int remoting_code, const std::string& message_id,
                std::int64_t queue_offset, const std::string& recall_handle, std::string* out) {
    v2::SendMessageResponse response;
    v2::SendResultEntry* entry = response.add_entries();
    if (remoting_code == rules.success_code) {
        entry->mutable_status()->set_code(v2::OK);
        entry->mutable_status()->set_message(v2::Code_Name(v2::OK));
        entry->set_message_id(message_id);
        entry->set_offset(queue_offset);
        entry->set_recall_handle(recall_handle);
    } else {
        const auto found = rules.entry_codes.find(remoting_code);
        if (found == rules.entry_codes.end()) return false;
        entry->mutable_status()->set_code(static_cast<v2::Code>(found->second.first));
        entry->mutable_status()->set_message(found->second.second);
    }
    const v2::Code code = entry->status().code();
    response.mutable_status()->set_code(code);
    response.mutable_status()->set_message(v2::Code_Name(code));
    return response.SerializeToString(out);
}

}  // namespace pybroker_front
