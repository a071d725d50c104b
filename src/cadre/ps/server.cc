// The gRPC service over ServerState, and the Server that owns the grpc::Server.
#include "cadre/ps/server.h"

#include <mutex>

#include "cadre/ps/credentials.h"
#include "cadre/ps/proto_util.h"

namespace cadre::ps {
namespace {

// gRPC's own limit is 4 MiB by default; clients keep messages well below it (ClientOptions), and
// the server accepts up to this much so that a larger client budget still works. Only members of
// the job get to send one: a connection without the job's credentials ends in the TLS handshake.
constexpr int kMaxMessageBytes = 64 << 20;
// Values one pull may ask for: what the largest client message budget (32 MiB, client.h) needs,
// so that a reply with its framing stays under kMaxMessageBytes.
constexpr size_t kMaxReplyPayloadBytes = size_t{32} << 20;

class Service final : public proto::ParameterServer::Service {
 public:
  explicit Service(ServerState* state) : state_(state) {}

  grpc::Status Declare(grpc::ServerContext* ctx, const proto::DeclareRequest* req,
                       proto::DeclareReply* rep) override {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    std::vector<DeclareArgs> parts;
    parts.reserve(static_cast<size_t>(req->partitions_size()));
    for (const proto::DeclarePartition& p : req->partitions()) {
      DeclareArgs a;
      a.id = FromProto(p.id());
      a.shape.assign(p.shape().begin(), p.shape().end());
      a.dtype = p.dtype();
      a.initial = p.initial();
      a.sync = p.sync();
      Status s = FromProto(p.optimizer(), &a.optimizer);
      if (!s.ok()) return ToGrpcStatus(s.WithContext("declare " + a.id.variable));
      parts.push_back(std::move(a));
    }
    std::vector<bool> created;
    Status s = state_->Declare(req->worker_id(), parts, &created);
    if (!s.ok()) return ToGrpcStatus(s);
    for (bool c : created) rep->add_created(c);
    return grpc::Status::OK;
  }

  grpc::Status Push(grpc::ServerContext* ctx, const proto::PushRequest* req,
                    proto::PushReply*) override {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    return ToGrpcStatus(state_->Push(req->worker_id(), req->step(), Chunks(req->grads())));
  }

  grpc::Status Pull(grpc::ServerContext* ctx, const proto::PullRequest* req,
                    proto::PullReply* rep) override {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    std::vector<PartitionRef> ids;
    for (const proto::PartitionId& id : req->ids()) ids.push_back(FromProto(id));
    return ToGrpcStatus(Emit(req->worker_id(), req->step(), ids, rep));
  }

  grpc::Status PushPull(grpc::ServerContext* ctx, const proto::PushPullRequest* req,
                        proto::PullReply* rep) override {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    Status s = state_->Push(req->worker_id(), req->step(), Chunks(req->grads()));
    if (!s.ok()) return ToGrpcStatus(s);
    std::vector<PartitionRef> ids;
    for (const proto::TensorChunk& c : req->grads()) ids.push_back(FromProto(c.id()));
    // Async partitions answer at once; sync ones once step + 1 is applied.
    return ToGrpcStatus(Emit(req->worker_id(), req->step() + 1, ids, rep));
  }

  grpc::Status WorkerDone(grpc::ServerContext* ctx, const proto::DoneRequest* req,
                          proto::DoneReply* rep) override {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    int remaining = 0;
    Status s = state_->WorkerDone(req->worker_id(), &remaining);
    if (!s.ok()) return ToGrpcStatus(s);
    rep->set_workers_remaining(remaining);
    return grpc::Status::OK;
  }

 private:
  // The TLS handshake already required a certificate of the job's CA (credentials.h); this
  // only guards against a server built with other credentials by mistake.
  static grpc::Status Authenticate(grpc::ServerContext* ctx) {
    auto auth = ctx->auth_context();
    if (!auth || !auth->IsPeerAuthenticated())
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the connection did not present this job's credentials");
    return grpc::Status::OK;
  }

  static std::vector<ChunkArgs> Chunks(
      const google::protobuf::RepeatedPtrField<proto::TensorChunk>& in) {
    std::vector<ChunkArgs> out;
    out.reserve(static_cast<size_t>(in.size()));
    for (const proto::TensorChunk& c : in) out.push_back({FromProto(c.id()), c.dtype(), c.data()});
    return out;
  }

  Status Emit(int worker, int64_t step, const std::vector<PartitionRef>& ids,
              proto::PullReply* rep) {
    return state_->Pull(worker, step, ids, [&](const PartitionRef& id, std::span<const float> v) {
      proto::TensorChunk* c = rep->add_values();
      ToProto(id, c->mutable_id());
      c->set_dtype("float32");
      c->set_data(reinterpret_cast<const char*>(v.data()), v.size_bytes());
    });
  }

  ServerState* state_;
};

}  // namespace

struct Server::Impl {
  std::unique_ptr<ServerState> state;
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::once_flag shutdown_once;
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { Shutdown(); }

Status Server::Start(const ServerOptions& options, std::unique_ptr<Server>* out) {
  if (options.num_workers < 1)
    return InvalidArgument("ps server: num_workers must be at least 1, got " +
                           std::to_string(options.num_workers));
  if (options.step_timeout <= Duration::zero())
    return InvalidArgument("ps server: step_timeout must be positive");
  if (options.handshake_timeout <= Duration::zero() ||
      options.handshake_timeout > std::chrono::hours(1))
    return InvalidArgument("ps server: handshake_timeout must be positive and at most an hour");
  // Bounded so that "now + timeout" cannot overflow the clock.
  if (options.worker_timeout <= Duration::zero() ||
      options.worker_timeout > std::chrono::hours(24 * 365))
    return InvalidArgument("ps server: worker_timeout must be positive and at most a year");
  TlsCredentials tls;
  CADRE_RETURN_IF_ERROR(DeriveTlsCredentials(options.token, &tls).WithContext("ps server"));
  HoldGrpcLibrary();
  auto impl = std::make_unique<Impl>();
  impl->state = std::make_unique<ServerState>(options.num_workers, options.step_timeout,
                                              options.worker_timeout, kMaxReplyPayloadBytes);
  impl->service = std::make_unique<Service>(impl->state.get());
  // Mutual TLS: every client must present a certificate of the job's CA before gRPC reads a
  // byte of its requests.
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = tls.ca_pem;
  ssl.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::SslServerCredentials(ssl), &impl->port);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(options.handshake_timeout.count()));
  builder.RegisterService(impl->service.get());
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0)
    return IoError("ps server: cannot listen on " + options.address +
                   " (address in use or not local?)");
  out->reset(new Server(std::move(impl)));
  return Status::Ok();
}

int Server::port() const { return impl_->port; }

ServerState& Server::state() { return *impl_->state; }

Status Server::WaitAllDone(const Deadline& deadline) { return impl_->state->WaitAllDone(deadline); }

void Server::Shutdown() {
  std::call_once(impl_->shutdown_once, [this] {
    impl_->state->Abort();
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    impl_->server->Wait();
  });
}

}  // namespace cadre::ps
