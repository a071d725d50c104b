// The gRPC service over ServerState, and the Server that owns the grpc::Server.
#include "cadre/ps/server.h"

#include <algorithm>
#include <mutex>

#include "cadre/ps/credentials.h"
#include "cadre/ps/proto_util.h"
#include "cadre/ps/wire.h"

namespace cadre::ps {
namespace {

// gRPC's own limit is 4 MiB by default; clients keep messages well below it (ClientOptions), and
// the server accepts up to this much so that a larger client budget still works. Only members of
// the job get to send one: a connection without the job's credentials ends in the TLS handshake.
constexpr int kMaxMessageBytes = 64 << 20;
// Values one pull may ask for: what the largest client message budget (32 MiB, client.h) needs,
// so that a reply with its framing stays under kMaxMessageBytes.
constexpr size_t kMaxReplyPayloadBytes = size_t{32} << 20;

// Idle buffers kept for the next RPCs (wire::BufferPool): enough for the requests and replies
// of several workers' 4 RPCs of 1 MiB in flight (ClientOptions).
constexpr size_t kPoolKeepBytes = size_t{64} << 20;

// gRPC's sync server keeps at most 2 idle threads polling for calls by default (max_pollers):
// a handler thread that finishes while 2 others poll exits, and the next call that finds too few
// pollers starts a new one. A sync PushPull blocks its thread until the step is applied, so each
// worker holds up to ClientOptions::max_in_flight (4) of them, all released together at the end of
// a step: with the default, nearly every RPC started and ended a thread (clone, a fresh stack
// faulted in, madvise at exit), ~95 threads per 64 MiB step at 2 x 2. Idle threads are kept
// instead, enough for every worker's calls in flight plus one; an idle poller costs no CPU (it
// waits on the completion queue, waking every 10 s).
constexpr int kPollersPerWorker = 4;
constexpr int kMaxIdlePollers = 1024;

// A buffer of the pool for one request's payloads (wire::DecodePush), given back at scope end.
class Scratch {
 public:
  explicit Scratch(wire::BufferPool& pool) : pool_(pool), buf_(pool.Take()) {}
  ~Scratch() { pool_.Give(std::move(buf_)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::string* get() { return buf_.get(); }

 private:
  wire::BufferPool& pool_;
  std::unique_ptr<std::string> buf_;
};

// The service of ps.proto, registered by hand rather than through the generated base class:
// Push, Pull and PushPull carry the tensors and are served from gRPC's byte buffers by the
// hand-written codec (wire.h), which spares protobuf's copies and allocations; the generated code
// offers raw types only to the async and callback APIs, and this server blocks in its handlers
// (a sync pull waits for the step). Declare and WorkerDone stay protobuf. Method names are the
// wire contract of ps.proto (proto_util.h); every call stays a plain unary one.
class Service final : public grpc::Service {
 public:
  explicit Service(ServerState* state)
      : state_(state), buffers_(wire::BufferPool::Create(kPoolKeepBytes)) {
    Add<proto::DeclareRequest, proto::DeclareReply>(kDeclareMethod, &Service::Declare);
    Add<grpc::ByteBuffer, grpc::ByteBuffer>(kPushMethod, &Service::RawPush);
    Add<grpc::ByteBuffer, grpc::ByteBuffer>(kPullMethod, &Service::RawPull);
    Add<grpc::ByteBuffer, grpc::ByteBuffer>(kPushPullMethod, &Service::RawPushPull);
    Add<proto::DoneRequest, proto::DoneReply>(kWorkerDoneMethod, &Service::WorkerDone);
    Add<proto::GetStateRequest, proto::GetStateReply>(kGetStateMethod, &Service::GetState);
    Add<proto::SetStateRequest, proto::SetStateReply>(kSetStateMethod, &Service::SetState);
  }

 private:
  // Registers a synchronous unary handler, as generated code does.
  template <typename Request, typename Reply>
  void Add(const char* method,
           grpc::Status (Service::*handler)(grpc::ServerContext*, const Request*, Reply*)) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        method, grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<Service, Request, Reply>(
            [handler](Service* service, grpc::ServerContext* ctx, const Request* req, Reply* rep) {
              return (service->*handler)(ctx, req, rep);
            },
            this)));
  }

  grpc::Status Declare(grpc::ServerContext* ctx, const proto::DeclareRequest* req,
                       proto::DeclareReply* rep) {
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

  grpc::Status WorkerDone(grpc::ServerContext* ctx, const proto::DoneRequest* req,
                          proto::DoneReply* rep) {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    int remaining = 0;
    Status s = state_->WorkerDone(req->worker_id(), &remaining);
    if (!s.ok()) return ToGrpcStatus(s);
    rep->set_workers_remaining(remaining);
    return grpc::Status::OK;
  }

  // Checkpoints: the optimizer state moves rarely, so protobuf carries it.
  grpc::Status GetState(grpc::ServerContext* ctx, const proto::GetStateRequest* req,
                        proto::GetStateReply* rep) {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    std::vector<PartitionRef> ids;
    ids.reserve(static_cast<size_t>(req->ids_size()));
    for (const proto::PartitionId& id : req->ids()) ids.push_back(FromProto(id));
    return ToGrpcStatus(state_->GetState(req->worker_id(), req->step(), ids,
                                         [rep](const PartitionRef& id, const Optimizer& opt) {
                                           proto::PartitionState* out = rep->add_states();
                                           ToProto(id, out->mutable_id());
                                           ToProto(opt.State(), out);
                                         }));
  }

  grpc::Status SetState(grpc::ServerContext* ctx, const proto::SetStateRequest* req,
                        proto::SetStateReply*) {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    using Phase = proto::SetStateRequest;
    if (req->phase() == Phase::COMMIT || req->phase() == Phase::DISCARD) {
      if (req->states_size() != 0)
        return ToGrpcStatus(InvalidArgument("set state: a commit or discard carries no states"));
      return ToGrpcStatus(state_->CommitState(req->worker_id(), req->phase() == Phase::COMMIT));
    }
    std::vector<StateArgs> states(static_cast<size_t>(req->states_size()));
    for (int i = 0; i < req->states_size(); ++i) {
      auto& st = states[static_cast<size_t>(i)];
      st.id = FromProto(req->states(i).id());
      Status s = FromProto(req->states(i), &st.state);
      if (!s.ok()) return ToGrpcStatus(s.WithContext("set state of " + st.id.variable));
    }
    if (req->phase() == Phase::STAGE)
      return ToGrpcStatus(state_->StageState(req->worker_id(), std::move(states)));
    if (req->phase() != Phase::APPLY)
      return ToGrpcStatus(InvalidArgument("set state: unknown phase " +
                                          std::to_string(static_cast<int>(req->phase()))));
    return ToGrpcStatus(state_->SetState(req->worker_id(), std::move(states)));
  }

  grpc::Status RawPush(grpc::ServerContext* ctx, const grpc::ByteBuffer* req,
                       grpc::ByteBuffer* rep) {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    Scratch scratch(*buffers_);
    wire::PushCall call;
    Status s = wire::DecodePush(*req, scratch.get(), &call);
    if (s.ok()) s = state_->Push(call.worker, call.step, call.chunks);
    if (!s.ok()) return ToGrpcStatus(s);
    *rep = EmptyMessage();
    return grpc::Status::OK;
  }

  grpc::Status RawPull(grpc::ServerContext* ctx, const grpc::ByteBuffer* req,
                       grpc::ByteBuffer* rep) {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    // The request is a few ids: protobuf parses it.
    grpc::ByteBuffer copy(*req);  // shares the slices; Deserialize consumes its argument
    proto::PullRequest pull;
    if (!grpc::SerializationTraits<proto::PullRequest>::Deserialize(&copy, &pull).ok())
      return ToGrpcStatus(ProtocolError("pull: the request is not a PullRequest"));
    std::vector<PartitionRef> ids;
    ids.reserve(static_cast<size_t>(pull.ids_size()));
    for (const proto::PartitionId& id : pull.ids()) ids.push_back(FromProto(id));
    return ToGrpcStatus(Emit(pull.worker_id(), pull.step(), ids, rep));
  }

  grpc::Status RawPushPull(grpc::ServerContext* ctx, const grpc::ByteBuffer* req,
                           grpc::ByteBuffer* rep) {
    if (auto denied = Authenticate(ctx); !denied.ok()) return denied;
    std::vector<PartitionRef> ids;
    wire::PushCall call;
    {
      Scratch scratch(*buffers_);
      Status s = wire::DecodePush(*req, scratch.get(), &call);
      if (s.ok()) s = state_->Push(call.worker, call.step, call.chunks);
      if (!s.ok()) return ToGrpcStatus(s);
    }  // the scratch goes back before this call waits for the step
    ids.reserve(call.chunks.size());
    for (ChunkArgs& c : call.chunks) ids.push_back(std::move(c.id));
    // Async partitions answer at once; sync ones once step + 1 is applied.
    return ToGrpcStatus(Emit(call.worker, call.step + 1, ids, rep));
  }

  // The TLS handshake already required a certificate of the job's CA (credentials.h); this
  // only guards against a server built with other credentials by mistake.
  static grpc::Status Authenticate(grpc::ServerContext* ctx) {
    auto auth = ctx->auth_context();
    if (!auth || !auth->IsPeerAuthenticated())
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the connection did not present this job's credentials");
    return grpc::Status::OK;
  }

  // An empty message (PushReply): zero bytes, but a message all the same.
  static grpc::ByteBuffer EmptyMessage() {
    grpc::Slice none;
    return grpc::ByteBuffer(&none, 1);
  }

  Status Emit(int worker, int64_t step, const std::vector<PartitionRef>& ids,
              grpc::ByteBuffer* rep) {
    // What the ids claim, capped at what a reply may hold: only a hint for the allocation.
    constexpr auto kMaxCount = static_cast<int64_t>(kMaxReplyPayloadBytes / sizeof(float));
    size_t hint = 0;
    for (const PartitionRef& id : ids)
      hint += static_cast<size_t>(std::clamp<int64_t>(id.count, 0, kMaxCount)) * sizeof(float);
    wire::PullReplyWriter writer(buffers_, std::min(hint, kMaxReplyPayloadBytes));
    Status s =
        state_->Pull(worker, step, ids,
                     [&](const PartitionRef& id, std::span<const float> v) { writer.Add(id, v); });
    if (s.ok()) *rep = writer.Finish();
    return s;
  }

  ServerState* state_;
  std::shared_ptr<wire::BufferPool> buffers_;
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
  // Workers ping every few seconds while their calls wait (ClientOptions::stall_timeout), a sync
  // pull that waits for other workers included, with no data in between: that is their liveness
  // check, not abuse, so pings never count as strikes (gRPC would close the connection after 2).
  // Only members of the job get to connect at all.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.RegisterService(impl->service.get());
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
      static_cast<int>(std::min<int64_t>(int64_t{options.num_workers} * kPollersPerWorker + 1,
                                         kMaxIdlePollers)));
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
