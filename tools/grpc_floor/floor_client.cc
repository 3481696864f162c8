// Load for tools/grpc_floor.py: COUNT unary calls of METHOD with a file's bytes as the request,
// IN_FLIGHT at a time over one channel, from one completion-queue thread (as one SDK client's
// channel); prints the calls answered OK and the wall seconds.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

namespace {

struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer answer;
    grpc::Status status;
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
};

}  // namespace

int main(int argc, char** argv) {
    if (argc != 6) {
        std::cerr << "usage: floor_client TARGET METHOD REQUEST_FILE COUNT IN_FLIGHT\n";
        return 2;
    }
    std::ifstream file(argv[3], std::ios::binary);
    const std::string request_bytes((std::istreambuf_iterator<char>(file)), {});
    const long count = std::stol(argv[4]);
    const long in_flight = std::stol(argv[5]);
    auto channel = grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials());
    grpc::GenericStub stub(channel);
    grpc::CompletionQueue queue;
    const std::string method = argv[2];
    long started = 0, finished = 0, good = 0;
    auto start = [&] {
        Call* call = new Call;
        grpc::Slice slice(request_bytes);
        grpc::ByteBuffer request(&slice, 1);
        call->reader = stub.PrepareUnaryCall(&call->context, method, request, &queue);
        call->reader->StartCall();
        call->reader->Finish(&call->answer, &call->status, call);
        ++started;
    };
    const auto begin = std::chrono::steady_clock::now();
    while (started < count && started < in_flight) start();
    void* tag;
    bool ok;
    while (finished < count && queue.Next(&tag, &ok)) {
        Call* call = static_cast<Call*>(tag);
        ++finished;
        if (ok && call->status.ok()) ++good;
        else if (good == 0 && finished == 1) std::cerr << call->status.error_message() << "\n";
        delete call;
        if (started < count) start();
    }
    const double seconds = std::chrono::duration<double>(
        std::chrono::steady_clock::now() - begin).count();
    std::cout << good << " " << seconds << std::endl;
    return good == count ? 0 : 1;
}
