// The gRPC front's relay: a libgrpc++ async generic server whose every call (unary, server
// streaming, bidi: all are streams of messages on the wire) is relayed message by message, as
// bytes, to the worker's grpcio service on its private socket, on one completion-queue thread.
#include "relay.h"

#include <grpcpp/alarm.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <grpc/support/time.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

namespace pybroker_front {

const char* const kPeerKey = "x-pybroker-peer";
const char* const kSendMessagePath = "/apache.rocketmq.v2.MessagingService/SendMessage";

namespace {

// Client metadata the relayed call carries: not what grpc sets on each hop itself, nor the
// peer key (the front's own).
bool Relayed(const grpc::string_ref& key) {
    const std::string name(key.data(), key.size());
    if (name.empty() || name[0] == ':' || name.rfind("grpc-", 0) == 0) return false;
    return name != "user-agent" && name != "te" && name != "content-type" && name != kPeerKey;
}

}  // namespace

class Relay;

class Front {
  public:
    grpc::AsyncGenericService service;
    std::unique_ptr<grpc::ServerCompletionQueue> queue;
    std::unique_ptr<grpc::Server> server;
    std::shared_ptr<grpc::Channel> backend;
    std::unique_ptr<grpc::GenericStub> stub;
    std::thread thread;
    std::atomic<std::uint64_t> accepted{0};
    std::atomic<std::uint64_t> handed_off{0};
    std::set<std::string> handoff_methods;
    int handoff_eventfd = -1;
    std::mutex handoff_lock;
    std::vector<Handoff> handoffs;      // under handoff_lock
    // Streamed calls (Config::stream_methods).
    std::set<std::string> stream_methods;
    std::uint64_t next_stream_id = 1;   // the queue thread's
    std::vector<Handoff> streams;       // under handoff_lock
    std::vector<std::uint64_t> cancelled;       // under handoff_lock
    std::vector<StreamReport> reports;  // under handoff_lock
    // Set by Stop once the grace is over and before the completion queue shuts down: an
    // answer after that is dropped (its call has ended) rather than posted to a dead queue.
    std::mutex answer_lock;
    bool answers_closed = false;        // under answer_lock

    // Fast sends (send.h).
    struct PendingSend {
        Handoff call;                   // what the worker gets back if the ring refuses it
        std::string message_id;
        std::shared_ptr<const SendRules> rules;
    };
    bool fast_sends = false;
    std::atomic<std::uint64_t> sent_fast{0};
    std::mutex rules_lock;
    std::shared_ptr<const SendRules> rules;             // under rules_lock
    QueueTurns turns;                   // the queue thread's
    std::uint32_t next_opaque = 0;      // the queue thread's
    std::mutex send_lock;
    std::vector<PeerSends> sends;       // under send_lock
    std::unordered_map<std::int32_t, PendingSend> pending_sends;   // under send_lock

    void Accept();
    void Run();
    void HandOff(Handoff call);
    void Notify(std::uint64_t id, bool cancelled, int written);
    bool PutSend(Handoff* call);
    void Signal();
};

// One public call and its relayed call. Every step runs on the front's queue thread; at most
// one read and one write is outstanding per stream; the relay frees itself when no operation
// of either call is outstanding.
class Relay {
  public:
    enum Op {
        kAccepted, kServerRead, kServerWrite, kServerFinish, kServerDone,
        kClientStart, kClientRead, kClientWrite, kClientWritesDone, kClientFinish,
        kAnswered, kOps
    };
    struct Tag {
        Relay* relay;
        Op op;
    };

    explicit Relay(Front* front) : front_(front) {
        for (int op = 0; op < kOps; ++op) tags_[op] = Tag{this, static_cast<Op>(op)};
        server_context_.AsyncNotifyWhenDone(&tags_[kServerDone]);
        front->service.RequestCall(&server_context_, &server_stream_, front->queue.get(),
                                   front->queue.get(), Next(kAccepted));
    }

    void Proceed(Op op, bool ok) {
        --pending_;
        switch (op) {
        case kAccepted:
            if (!ok) {          // the server is shutting down: the call never started
                delete this;
                return;
            }
            ++pending_;         // the done notification, armed when the call started
            front_->accepted.fetch_add(1, std::memory_order_relaxed);
            front_->Accept();
            if (front_->stream_methods.count(server_context_.method()) != 0) {
                handed_off_ = streamed_ = true;
                server_stream_.Read(&request_, Next(kServerRead));
            } else if (front_->handoff_methods.count(server_context_.method()) != 0) {
                handed_off_ = true;
                server_stream_.Read(&request_, Next(kServerRead));
            } else {
                StartClient();
            }
            break;
        case kServerRead:
            if (handed_off_) {
                HandOffRequest(ok);
                break;
            }
            // The backend took no more, or its status is on the way: nothing more to relay.
            if (client_writes_closed_ || client_finishing_) break;
            if (ok) {
                client_stream_->Write(request_, Next(kClientWrite));
            } else {            // the caller half-closed
                client_writes_closed_ = true;
                client_stream_->WritesDone(Next(kClientWritesDone));
            }
            break;
        case kClientWrite:
            if (!ok) {          // the backend ended the call; its status comes by the reads
                client_writes_closed_ = true;
            } else if (!server_finishing_) {
                server_stream_.Read(&request_, Next(kServerRead));
            }
            break;
        case kClientRead:
            if (ok) {
                server_stream_.Write(response_, Next(kServerWrite));
            } else {
                FinishClient();
            }
            break;
        case kServerWrite:
            if (streamed_) {
                if (!ok) {      // the caller is gone: the rest is not written
                    Reported();
                    server_stream_.Finish(grpc::Status::CANCELLED, Next(kServerFinish));
                    break;
                }
                ++written_;
                WriteStream();
                break;
            }
            if (ok) {
                client_stream_->Read(&response_, Next(kClientRead));
            } else {            // the caller is gone
                client_context_.TryCancel();
                FinishClient();
            }
            break;
        case kClientFinish:
            for (const auto& [key, value] : client_context_.GetServerTrailingMetadata()) {
                if (Relayed(key)) {
                    server_context_.AddTrailingMetadata(std::string(key.data(), key.size()),
                                                        std::string(value.data(), value.size()));
                }
            }
            server_finishing_ = true;
            server_stream_.Finish(status_, Next(kServerFinish));
            break;
        case kServerDone:
            if (!handed_off_ && server_context_.IsCancelled()) client_context_.TryCancel();
            if (id_ != 0 && server_context_.IsCancelled()) {
                // A streamed call the worker has not answered: it drops the held request.
                std::lock_guard<std::mutex> hold(front_->answer_lock);
                if (!answered_) front_->Notify(id_, true, 0);
            }
            break;
        case kAnswered:         // the worker's answer (Answer), posted by the alarm
            if (!stream_.empty()) {
                WriteStream();
            } else if (answer_status_.ok()) {
                server_stream_.WriteAndFinish(response_, grpc::WriteOptions(), answer_status_,
                                              Next(kServerFinish));
            } else {
                server_stream_.Finish(answer_status_, Next(kServerFinish));
            }
            break;
        case kClientStart:
            // The start's operation set carries the writes too: the first request is read
            // when it is done. A call that could not start ends by its reads (Finish).
            if (ok) server_stream_.Read(&request_, Next(kServerRead));
            break;
        case kServerFinish:
            if (!stream_.empty() && !reported_) {   // the last response and the status
                if (ok) ++written_;
                Reported();
            }
            break;
        case kClientWritesDone:
        case kOps:
            break;
        }
        if (pending_ == 0) delete this;
    }

    // From any thread under the front's answer lock, once per handed-off call (its kAnswered
    // was counted at the hand-off).
    void SetAnswer(const std::string& response, int code, const std::string& details) {
        answered_ = true;
        if (code == 0) {
            grpc::Slice slice(response);
            response_ = grpc::ByteBuffer(&slice, 1);
            answer_status_ = grpc::Status::OK;
        } else {
            answer_status_ = grpc::Status(static_cast<grpc::StatusCode>(code), details);
        }
        // A deadline already past: grpc rounds a deadline up to its next millisecond, so
        // "now" would wait for a round of grpc's timers instead of being posted at once.
        alarm_.Set(front_->queue.get(), gpr_inf_past(GPR_CLOCK_MONOTONIC), &tags_[kAnswered]);
    }

    // As SetAnswer, for a streamed call: its responses, written in order.
    void SetStream(std::vector<std::string> responses, bool report) {
        answered_ = true;
        report_ = report;
        stream_.reserve(responses.size());
        for (const std::string& response : responses) {
            grpc::Slice slice(response);
            stream_.emplace_back(&slice, 1);
        }
        alarm_.Set(front_->queue.get(), gpr_inf_past(GPR_CLOCK_MONOTONIC), &tags_[kAnswered]);
    }

  private:
    void* Next(Op op) {
        ++pending_;
        return &tags_[op];
    }

    void StartClient() {
        for (const auto& [key, value] : server_context_.client_metadata()) {
            if (Relayed(key)) {
                client_context_.AddMetadata(std::string(key.data(), key.size()),
                                            std::string(value.data(), value.size()));
            }
        }
        client_context_.AddMetadata(kPeerKey, server_context_.peer());
        client_context_.set_deadline(server_context_.raw_deadline());
        client_stream_ = front_->stub->PrepareCall(&client_context_, server_context_.method(),
                                                   front_->queue.get());
        client_stream_->StartCall(Next(kClientStart));
        client_stream_->Read(&response_, Next(kClientRead));
    }

    // A call for the worker (unary, or streamed: one request too): its one request (or its
    // absence) goes to the hand-off or stream list, or the send list; the call stays until
    // the worker answers it (kAnswered).
    void HandOffRequest(bool ok) {
        if (!ok) {              // no request message: answered as grpc++ answers it
            server_stream_.Finish(grpc::Status(grpc::StatusCode::INTERNAL,
                                               "the client sent no request message"),
                                  Next(kServerFinish));
            return;
        }
        Handoff call;
        call.handle = reinterpret_cast<std::uintptr_t>(this);
        call.method = server_context_.method();
        std::vector<grpc::Slice> slices;
        if (request_.Dump(&slices).ok()) {
            call.request.reserve(request_.Length());
            for (const grpc::Slice& slice : slices) {
                call.request.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
            }
        }
        for (const auto& [key, value] : server_context_.client_metadata()) {
            if (Relayed(key)) {
                call.metadata.emplace_back(std::string(key.data(), key.size()),
                                           std::string(value.data(), value.size()));
            }
        }
        call.peer = server_context_.peer();
        ++pending_;             // kAnswered: the worker answers every handed-off call
        if (streamed_) {
            id_ = call.id = front_->next_stream_id++;
            const gpr_timespec deadline = server_context_.raw_deadline();
            if (gpr_time_cmp(deadline, gpr_inf_future(deadline.clock_type)) != 0) {
                const gpr_timespec wall = gpr_convert_clock_type(deadline, GPR_CLOCK_REALTIME);
                call.deadline = static_cast<double>(wall.tv_sec) + wall.tv_nsec / 1e9;
            }
            front_->HandOff(std::move(call));
        } else if (!front_->PutSend(&call)) {
            front_->HandOff(std::move(call));
        }
    }

    // The streamed call's next response; the last one goes with the status. Messages are
    // written as they are asked for (no buffering hint): each write's completion says the
    // caller's transport took it, which is what the worker's count of written ones means.
    void WriteStream() {
        const size_t next = static_cast<size_t>(written_);
        if (next + 1 < stream_.size()) {
            server_stream_.Write(stream_[next], Next(kServerWrite));
        } else {
            server_stream_.WriteAndFinish(stream_[next], grpc::WriteOptions(),
                                          grpc::Status::OK, Next(kServerFinish));
        }
    }

    void Reported() {
        reported_ = true;
        if (report_) front_->Notify(id_, false, written_);
    }

    void FinishClient() {
        if (client_finishing_) return;
        client_finishing_ = true;
        client_stream_->Finish(&status_, Next(kClientFinish));
    }

    Front* front_;
    Tag tags_[kOps];
    int pending_ = 0;
    grpc::GenericServerContext server_context_;
    grpc::GenericServerAsyncReaderWriter server_stream_{&server_context_};
    grpc::ClientContext client_context_;
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> client_stream_;
    grpc::ByteBuffer request_;
    grpc::ByteBuffer response_;
    grpc::Status status_;
    grpc::Alarm alarm_;
    grpc::Status answer_status_;
    bool handed_off_ = false;
    // Streamed calls: the call's id once handed off, whether the worker answered (under the
    // front's answer lock), the responses to write, how many were, whether the worker wants
    // that count and whether it went.
    bool streamed_ = false;
    std::uint64_t id_ = 0;
    bool answered_ = false;
    std::vector<grpc::ByteBuffer> stream_;
    int written_ = 0;
    bool report_ = false;
    bool reported_ = false;
    bool client_writes_closed_ = false;   // WritesDone sent, or the backend took no more
    bool client_finishing_ = false;
    bool server_finishing_ = false;
};

void Front::Accept() { new Relay(this); }

// A unary call joins the hand-off list, a streamed one (with its id) the stream list.
void Front::HandOff(Handoff call) {
    handed_off.fetch_add(1, std::memory_order_relaxed);
    bool was_empty;
    {
        std::lock_guard<std::mutex> hold(handoff_lock);
        std::vector<Handoff>& waiting = call.id != 0 ? streams : handoffs;
        was_empty = waiting.empty();
        waiting.push_back(std::move(call));
    }
    if (was_empty) Signal();    // the worker reads the eventfd before it takes the lists
}

// A streamed call's cancel, or the count of its responses written.
void Front::Notify(std::uint64_t id, bool cancel, int written) {
    bool was_empty;
    {
        std::lock_guard<std::mutex> hold(handoff_lock);
        was_empty = cancelled.empty() && reports.empty();
        if (cancel) {
            cancelled.push_back(id);
        } else {
            reports.push_back(StreamReport{id, written});
        }
    }
    if (was_empty) Signal();
}

void Front::Signal() {
    const std::uint64_t one = 1;
    ssize_t written = write(handoff_eventfd, &one, sizeof one);
    (void)written;              // EAGAIN: the counter is already non-zero
}

// A SendMessage call the front may put itself joins the send list as its remoting frame;
// false leaves *call to the hand-off.
bool Front::PutSend(Handoff* call) {
    if (!fast_sends || call->method != kSendMessagePath) return false;
    std::shared_ptr<const SendRules> current;
    {
        std::lock_guard<std::mutex> hold(rules_lock);
        current = rules;
    }
    if (current == nullptr) return false;
    std::string client_id;      // the last value under the key, as the service reads it
    for (const auto& [key, value] : call->metadata) {
        if (key == current->client_id_key) client_id = value;
    }
    const auto opaque = static_cast<std::int32_t>(next_opaque++);
    SendFrame frame;
    if (!BuildSendFrame(call->request, client_id, *current, &turns, opaque, &frame)) {
        return false;
    }
    bool was_empty;
    {
        std::lock_guard<std::mutex> hold(send_lock);
        was_empty = sends.empty();
        PeerSends* batch = nullptr;
        for (PeerSends& waiting : sends) {
            if (waiting.peer == call->peer) batch = &waiting;
        }
        if (batch == nullptr) {
            sends.push_back(PeerSends{call->peer, {}, 0});
            batch = &sends.back();
        }
        batch->frames.append(frame.frame);
        ++batch->count;
        pending_sends[opaque] = PendingSend{std::move(*call), std::move(frame.message_id),
                                            std::move(current)};
    }
    sent_fast.fetch_add(1, std::memory_order_relaxed);
    if (was_empty) Signal();
    return true;
}

void Front::Run() {
    void* tag;
    bool ok;
    while (queue->Next(&tag, &ok)) {
        auto* step = static_cast<Relay::Tag*>(tag);
        step->relay->Proceed(step->op, ok);
    }
}

Front* Start(const Config& config, std::string* error) {
    auto front = std::make_unique<Front>();
    grpc::ServerBuilder builder;
    builder.SetMaxReceiveMessageSize(config.max_message_bytes);
    builder.SetMaxSendMessageSize(config.max_message_bytes);
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 1);
    std::vector<int> bound(config.plain_addresses.size() + config.tls_addresses.size(), 0);
    size_t index = 0;
    for (const std::string& address : config.plain_addresses) {
        builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &bound[index++]);
    }
    if (!config.tls_addresses.empty()) {
        grpc::SslServerCredentialsOptions tls(
            config.require_client_auth
                ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
        tls.pem_root_certs = config.trusted;
        tls.pem_key_cert_pairs.push_back({config.private_key, config.certificate_chain});
        auto credentials = grpc::SslServerCredentials(tls);
        for (const std::string& address : config.tls_addresses) {
            builder.AddListeningPort(address, credentials, &bound[index++]);
        }
    }
    builder.RegisterAsyncGenericService(&front->service);
    front->queue = builder.AddCompletionQueue();
    front->server = builder.BuildAndStart();
    bool all_bound = front->server != nullptr;
    for (int port : bound) all_bound = all_bound && port != 0;
    if (!all_bound) {
        *error = "the gRPC front could not bind its listeners";
        if (front->server != nullptr) front->server->Shutdown();
        front->queue->Shutdown();
        void* tag;
        bool ok;
        while (front->queue->Next(&tag, &ok)) {
        }
        return nullptr;
    }
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(config.max_message_bytes);
    arguments.SetMaxSendMessageSize(config.max_message_bytes);
    front->backend = grpc::CreateCustomChannel(config.backend, grpc::InsecureChannelCredentials(),
                                               arguments);
    front->stub = std::make_unique<grpc::GenericStub>(front->backend);
    front->handoff_methods.insert(config.handoff_methods.begin(), config.handoff_methods.end());
    front->stream_methods.insert(config.stream_methods.begin(), config.stream_methods.end());
    front->handoff_eventfd = config.handoff_eventfd;
    front->fast_sends = config.fast_sends;
    front->Accept();
    Front* started = front.release();
    started->thread = std::thread([started] { started->Run(); });
    return started;
}

void Stop(Front* front, double grace_s) {
    // Shutdown waits for the calls in flight (the queue thread still relays their answers)
    // until the deadline, then cancels those left.
    front->server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::milliseconds(static_cast<long>(grace_s * 1000)));
    {
        std::lock_guard<std::mutex> hold(front->answer_lock);
        front->answers_closed = true;
    }
    front->queue->Shutdown();
    front->thread.join();
}

void Destroy(Front* front) {
    delete front;
}

std::uint64_t CallsAccepted(const Front* front) {
    return front->accepted.load(std::memory_order_relaxed);
}

std::uint64_t CallsHandedOff(const Front* front) {
    return front->handed_off.load(std::memory_order_relaxed);
}

void SetSendRules(Front* front, std::shared_ptr<const SendRules> rules) {
    std::lock_guard<std::mutex> hold(front->rules_lock);
    front->rules = std::move(rules);
}

std::uint64_t CallsSentFast(const Front* front) {
    return front->sent_fast.load(std::memory_order_relaxed);
}

void TakeSends(Front* front, std::vector<PeerSends>* out) {
    std::lock_guard<std::mutex> hold(front->send_lock);
    out->swap(front->sends);
}

bool TakeFallback(Front* front, std::int32_t opaque, Handoff* out) {
    std::lock_guard<std::mutex> hold(front->send_lock);
    auto found = front->pending_sends.find(opaque);
    if (found == front->pending_sends.end()) return false;
    *out = std::move(found->second.call);
    front->pending_sends.erase(found);
    front->handed_off.fetch_add(1, std::memory_order_relaxed);
    return true;
}

std::uintptr_t AnswerSend(Front* front, std::int32_t opaque, int code,
                          std::int64_t queue_offset, const std::string& recall_handle) {
    Front::PendingSend send;
    {
        std::lock_guard<std::mutex> hold(front->send_lock);
        auto found = front->pending_sends.find(opaque);
        if (found == front->pending_sends.end()) return 0;
        send = std::move(found->second);
        front->pending_sends.erase(found);
    }
    std::string response;
    if (!SendAnswer(*send.rules, code, send.message_id, queue_offset, recall_handle,
                    &response)) {
        return send.call.handle;
    }
    std::lock_guard<std::mutex> hold(front->answer_lock);
    if (!front->answers_closed) {
        reinterpret_cast<Relay*>(send.call.handle)->SetAnswer(response, 0, "");
    }
    return 0;
}

void TakeHandoffs(Front* front, std::vector<Handoff>* out) {
    std::lock_guard<std::mutex> hold(front->handoff_lock);
    out->swap(front->handoffs);
}

void TakeStreams(Front* front, std::vector<Handoff>* out) {
    std::lock_guard<std::mutex> hold(front->handoff_lock);
    out->swap(front->streams);
}

void TakeCancelled(Front* front, std::vector<std::uint64_t>* out) {
    std::lock_guard<std::mutex> hold(front->handoff_lock);
    out->swap(front->cancelled);
}

void TakeReports(Front* front, std::vector<StreamReport>* out) {
    std::lock_guard<std::mutex> hold(front->handoff_lock);
    out->swap(front->reports);
}

void AnswerStream(Front* front, std::uintptr_t handle, std::vector<std::string> responses,
                  bool report) {
    std::lock_guard<std::mutex> hold(front->answer_lock);
    if (!front->answers_closed) {
        reinterpret_cast<Relay*>(handle)->SetStream(std::move(responses), report);
    }
}

void Answer(Front* front, std::uintptr_t handle, const std::string& response, int code,
            const std::string& details) {
    std::lock_guard<std::mutex> hold(front->answer_lock);
    if (!front->answers_closed) {
        reinterpret_cast<Relay*>(handle)->SetAnswer(response, code, details);
    }
}

}  // namespace pybroker_front
