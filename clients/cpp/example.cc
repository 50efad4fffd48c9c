// Streams one greedy chat completion from an arbi-serve server, then prints the server's description
// from the admin API.
//
// Usage: ARBI_ADMIN_TOKEN=... example HOST:PORT
// ARBI_GENERATE_TOKEN is sent with the generate call when the server requires one.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "arbi/v1/admin_service.grpc.pb.h"
#include "arbi/v1/generate_service.grpc.pb.h"

namespace {

constexpr char kQuestion[] = "What is the capital of France?";

// The value of an environment variable, empty when unset.
std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// Sets the call's deadline and, for a non-empty token, `authorization: Bearer <token>`.
void PrepareCall(grpc::ClientContext& context, const std::string& token) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
  if (!token.empty()) {
    context.AddMetadata("authorization", "Bearer " + token);
  }
}

// Prints the answer to kQuestion as it streams, then the finish reason and token usage.
grpc::Status StreamChat(arbi::v1::GenerateService::Stub& stub, const std::string& token) {
  arbi::v1::GenerateRequest request;
  arbi::v1::ChatMessage* message = request.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content(kQuestion);
  request.mutable_sampling()->set_temperature(0.0F);
  request.mutable_stopping()->set_max_output_tokens(32);

  grpc::ClientContext context;
  PrepareCall(context, token);
  std::unique_ptr<grpc::ClientReader<arbi::v1::GenerateResponse>> stream = stub.Generate(&context, request);
  arbi::v1::GenerateResponse response;
  while (stream->Read(&response)) {
    std::cout << response.text() << std::flush;
    if (response.has_usage()) {
      std::cout << "\nfinish: " << arbi::v1::FinishReason_Name(response.finish_reason())
                << ", prompt tokens: " << response.usage().prompt_token_count()
                << ", output tokens: " << response.usage().output_token_count() << std::endl;
    }
  }
  return stream->Finish();
}

// Prints what the server is and serves.
grpc::Status PrintServerInfo(arbi::v1::AdminService::Stub& stub, const std::string& token) {
  grpc::ClientContext context;
  PrepareCall(context, token);
  arbi::v1::GetServerInfoResponse info;
  grpc::Status status = stub.GetServerInfo(&context, arbi::v1::GetServerInfoRequest(), &info);
  if (status.ok()) {
    const arbi::v1::ModelInfo& model = info.model();
    std::cout << "server: arbi-serve " << info.version() << ", model " << model.name() << " ("
              << model.architecture() << ", " << model.max_context_tokens() << " context tokens), backend "
              << info.backend() << " on " << info.device() << ", kv codec " << info.kv_codec() << std::endl;
  }
  return status;
}

int Fail(const char* what, const grpc::Status& status) {
  std::cerr << "error: " << what << ": code " << status.error_code() << ": " << status.error_message()
            << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: ARBI_ADMIN_TOKEN=... example HOST:PORT" << std::endl;
    return 2;
  }
  const std::string admin_token = Env("ARBI_ADMIN_TOKEN");
  if (admin_token.empty()) {
    std::cerr << "error: ARBI_ADMIN_TOKEN is not set (the server mints it into the admin-token file of its "
                 "cache directory)"
              << std::endl;
    return 2;
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials());
  std::unique_ptr<arbi::v1::GenerateService::Stub> generate = arbi::v1::GenerateService::NewStub(channel);
  grpc::Status status = StreamChat(*generate, Env("ARBI_GENERATE_TOKEN"));
  if (!status.ok()) {
    return Fail("generate", status);
  }
  std::unique_ptr<arbi::v1::AdminService::Stub> admin = arbi::v1::AdminService::NewStub(channel);
  status = PrintServerInfo(*admin, admin_token);
  if (!status.ok()) {
    return Fail("server info", status);
  }
  return 0;
}
