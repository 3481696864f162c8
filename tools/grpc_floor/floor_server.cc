// The cheapest gRPC server libgrpc++ allows for one kind of call: every unary call, whatever
// its method, is answered with the same prepared message (a file's bytes) and status OK, from
// one completion-queue thread. tools/grpc_floor.py measures its CPU per call next to grpcio's
// Python servers; it is a floor for a C++ front, not a broker (the request is not parsed).
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

namespace {

struct Call {
    enum class Step { kNew, kRead, kWrite, kDone };
    grpc::GenericServerContext context;
    grpc::GenericServerAsyncReaderWriter stream{&context};
    grpc::ByteBuffer request;
    Step step = Step::kNew;
};

grpc::ByteBuffer Prepared(const std::string& bytes) {
    grpc::Slice slice(bytes);
    return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: floor_server PORT ANSWER_FILE\n";
        return 2;
    }
    std::ifstream file(argv[2], std::ios::binary);
    const std::string answer((std::istreambuf_iterator<char>(file)), {});
    grpc::AsyncGenericService service;
    grpc::ServerBuilder builder;
    builder.AddListeningPort(std::string("127.0.0.1:") + argv[1],
                             grpc::InsecureServerCredentials());
    builder.RegisterAsyncGenericService(&service);
    std::unique_ptr<grpc::ServerCompletionQueue> queue = builder.AddCompletionQueue();
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    std::cout << "listening" << std::endl;
    auto accept = [&] {
        Call* call = new Call;
        service.RequestCall(&call->context, &call->stream, queue.get(), queue.get(), call);
    };
    accept();
    void* tag;
    bool ok;
    while (queue->Next(&tag, &ok)) {
        Call* call = static_cast<Call*>(tag);
        if (!ok && call->step != Call::Step::kWrite) {
            if (call->step == Call::Step::kNew) break;   // the server is shutting down
            delete call;
            continue;
        }
        switch (call->step) {
        case Call::Step::kNew:
            accept();
            call->step = Call::Step::kRead;
            call->stream.Read(&call->request, call);
            break;
        case Call::Step::kRead:
            call->step = Call::Step::kWrite;
            call->stream.WriteAndFinish(Prepared(answer), grpc::WriteOptions(),
                                        grpc::Status::OK, call);
            break;
        case Call::Step::kWrite:
        case Call::Step::kDone:
            delete call;
            break;
        }
    }
    return 0;
}
