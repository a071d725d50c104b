#include "cadre/ps/client.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include <grpcpp/generic/generic_stub.h>

#include "cadre/ps/credentials.h"
#include "cadre/ps/proto_util.h"
#include "cadre/ps/wire.h"

namespace cadre::ps {
namespace {

using DoneFn = std::function<void(grpc::Status)>;

// One server's stubs: protobuf messages for Declare and WorkerDone, raw byte buffers (wire.h)
// for the calls that carry tensors.
struct Stubs {
  std::unique_ptr<proto::ParameterServer::Stub> typed;
  std::unique_ptr<grpc::GenericStub> raw;
};

// One RPC of a batch: `start` begins the async call; `finish` consumes the reply once it succeeded.
// `what` names it in errors: the operation and the partitions it carries.
struct Task {
  std::function<void(Stubs&, grpc::ClientContext*, DoneFn)> start;
  std::function<Status()> finish;
  std::string what;
};

// A partition of one call's tensors, with where its bytes come from and go to.
struct Piece {
  const Partition* part;
  const float* src = nullptr;
  float* dst = nullptr;
  std::optional<float> lr;               // pushes: the update's learning rate
  std::optional<OptimizerConfig> hyper;  // pushes: the update's hyper-parameters
};

// "push of 'fc.weight' partitions 0-3, 'fc.bias' partition 0": what an RPC of `batch` carries
// (a batch holds each variable's partitions in increasing order), for its errors.
std::string Describe(const char* op, const std::vector<Piece>& batch) {
  constexpr size_t kMaxNamed = 3;
  std::string out = std::string(op) + " of ";
  size_t named = 0, i = 0;
  while (i < batch.size()) {
    size_t j = i;
    while (j + 1 < batch.size() && batch[j + 1].part->variable == batch[i].part->variable) ++j;
    if (named == kMaxNamed) {
      size_t more = 0;
      for (size_t k = i; k < batch.size(); ++k)
        if (k == i || batch[k].part->variable != batch[k - 1].part->variable) ++more;
      return out + " and " + std::to_string(more) + " more variables";
    }
    const int first = batch[i].part->index, last = batch[j].part->index;
    out += std::string(named ? ", " : "") + "'" + batch[i].part->variable + "' partition" +
           (first == last ? " " + std::to_string(first)
                          : "s " + std::to_string(first) + "-" + std::to_string(last));
    ++named;
    i = j + 1;
  }
  return out;
}

std::string SecondsText(Duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", std::chrono::duration<double>(d).count());
  return text;
}

// gRPC closes a connection whose keepalive ping went unanswered (ClientOptions::stall_timeout)
// with UNAVAILABLE and a message of its own; says what that means instead.
Status Explain(const grpc::Status& g, Duration stall_timeout) {
  if (g.error_code() == grpc::StatusCode::UNAVAILABLE &&
      g.error_message().find("keepalive") != std::string::npos)
    return IoError("stalled: no answer to a liveness ping within " +
                   SecondsText(stall_timeout / 2) +
                   " (the server process is stopped or hung, or its host or link is down; "
                   "stall_timeout " +
                   SecondsText(stall_timeout) + "; gRPC: " + g.error_message() + ")");
  return FromGrpcStatus(g);
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

struct Client::Impl {
  ClientOptions options;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<Stubs> stubs;
  ShardMap map;
  bool declared = false;
  bool done = false;

  std::string ServerName(int s) const {
    return "ps server " + std::to_string(s) + " (" + options.servers[static_cast<size_t>(s)] + ")";
  }

  // Runs the tasks, up to max_in_flight per server at once; returns the first failure.
  Status Run(std::vector<std::deque<Task>> queues, Duration timeout, bool wait_for_ready);

  // Push or PushPull (`reply_values`) of the pieces' gradients, sent from where they lie; returns
  // once gRPC holds no slice of them any more.
  Status RunPushes(const std::vector<Piece>& pieces, const char* method, int64_t step,
                   bool reply_values);

  // Ends a SetOptimizerState: every server applies (`commit`) or drops what this worker staged.
  Status EndStaging(bool commit);

  // Groups pieces by server and into RPC-sized batches (whole partitions, <= message_bytes
  // divided by `values_per_element`, the float32 values a piece carries per element).
  std::vector<std::vector<std::vector<Piece>>> Batches(const std::vector<Piece>& pieces,
                                                       int values_per_element = 1) const;

  // The partitions of a declared variable whose tensor has `count` elements (none: unchecked).
  Status Resolve(const std::string& what, const std::string& name, std::optional<int64_t> count,
                 const std::vector<Partition>** parts) const;

  // After Declare found no server in time: why the first server that is not connected could not
  // be reached, from one quick call that does not wait for the connection (gRPC then reports
  // its last attempt: refused, unresolved, a failed TLS handshake...). `failure` otherwise.
  Status Unreachable(const Status& failure);
};

Status Client::Impl::Unreachable(const Status& failure) {
  for (size_t s = 0; s < channels.size(); ++s) {
    if (channels[s]->GetState(false) == GRPC_CHANNEL_READY) continue;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    proto::PullRequest req;  // no partitions: nothing to wait for, nothing changed
    req.set_worker_id(options.worker_id);
    proto::PullReply rep;
    const grpc::Status probe = stubs[s].typed->Pull(&ctx, req, &rep);
    if (probe.ok()) continue;
    const std::string& why = probe.error_message();
    const bool tls = why.find("andshake") != std::string::npos ||
                     why.find("certificate") != std::string::npos ||
                     why.find("SSL") != std::string::npos;
    return Status(failure.code(),
                  ServerName(static_cast<int>(s)) + ": no connection within the connect timeout" +
                      (tls ? ": the TLS handshake failed, so the server does not hold this job's "
                             "credentials (every learner must get the same CADRE_JOB_TOKEN), or "
                             "is not a cadre parameter server (" +
                                 why + ")"
                           : " (" + why + ")"));
  }
  return failure;
}

Status Client::Impl::Run(std::vector<std::deque<Task>> queues, Duration timeout,
                         bool wait_for_ready) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::deque<Task>> queues;
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    size_t outstanding = 0;
    Status error;
  } st;
  st.queues = std::move(queues);
  for (const auto& q : st.queues) st.outstanding += q.size();

  // Starts the next task of server `s`; the caller holds no lock.
  std::function<void(int)> launch = [&](int s) {
    // The task (which owns the request and reply) lives until its completion callback ends.
    auto task = std::make_shared<Task>();
    grpc::ClientContext* ctx;
    {
      std::lock_guard lock(st.mu);
      auto& q = st.queues[static_cast<size_t>(s)];
      if (q.empty()) return;
      *task = std::move(q.front());
      q.pop_front();
      st.contexts.push_back(std::make_unique<grpc::ClientContext>());
      ctx = st.contexts.back().get();
    }
    ctx->set_deadline(std::chrono::system_clock::now() + timeout);
    ctx->set_wait_for_ready(wait_for_ready);
    task->start(stubs[static_cast<size_t>(s)], ctx, [this, &st, &launch, s, task](grpc::Status g) {
      Status status = Explain(g, options.stall_timeout);
      if (status.ok()) status = task->finish();
      bool more = false;
      std::vector<grpc::ClientContext*> started;
      {
        std::lock_guard lock(st.mu);
        if (!status.ok() && st.error.ok()) {
          st.error =
              status.WithContext(ServerName(s) + (task->what.empty() ? "" : ", " + task->what));
          // Stop here: drop every task not yet started, and cancel the others (below), so that
          // the call fails now rather than when a sync step on another server gives up waiting
          // for partitions this worker will not send.
          for (auto& q : st.queues) {
            st.outstanding -= q.size();
            q.clear();
          }
          for (auto& c : st.contexts) started.push_back(c.get());
        }
        more = !st.queues[static_cast<size_t>(s)].empty();
        // Once `outstanding` reaches zero the caller may destroy `st`: touch nothing
        // after this unlock unless another task of ours is still counted.
        if (!more && started.empty()) {
          st.outstanding -= 1;
          st.cv.notify_all();
          return;
        }
      }
      // This task is still counted, so `st` and its contexts are alive. Outside the lock: a
      // cancelled call may complete on this thread.
      for (grpc::ClientContext* c : started) c->TryCancel();
      if (more) launch(s);  // our own slot passes to the next task before we count down
      std::lock_guard lock(st.mu);
      st.outstanding -= 1;
      st.cv.notify_all();
    });
  };

  for (size_t s = 0; s < st.queues.size(); ++s)
    for (int k = 0; k < options.max_in_flight; ++k) launch(static_cast<int>(s));

  std::unique_lock lock(st.mu);
  // Every RPC has its own deadline, so gRPC completes each one by `timeout`; the margin only
  // guards against a lost callback.
  if (!st.cv.wait_for(lock, timeout + std::chrono::seconds(30),
                      [&] { return st.outstanding == 0; })) {
    for (auto& ctx : st.contexts) ctx->TryCancel();
    st.cv.wait(lock, [&] { return st.outstanding == 0; });
    if (st.error.ok()) st.error = TimeoutError("ps client: RPCs did not complete in time");
  }
  return st.error;
}

std::vector<std::vector<std::vector<Piece>>> Client::Impl::Batches(const std::vector<Piece>& pieces,
                                                                   int values_per_element) const {
  std::vector<std::vector<std::vector<Piece>>> out(stubs.size());
  std::vector<int64_t> bytes(stubs.size(), 0);
  const int64_t budget = options.message_bytes / values_per_element;
  for (const Piece& p : pieces) {
    auto s = static_cast<size_t>(p.part->server);
    int64_t b = p.part->count * static_cast<int64_t>(sizeof(float));
    if (out[s].empty() || bytes[s] + b > budget) {
      out[s].emplace_back();
      bytes[s] = 0;
    }
    out[s].back().push_back(p);
    bytes[s] += b;
  }
  return out;
}

Status Client::Impl::Resolve(const std::string& what, const std::string& name,
                             std::optional<int64_t> count,
                             const std::vector<Partition>** parts) const {
  if (!declared) return MismatchError(what + ": Declare() the variables first");
  if (!map.contains(name)) return NotFound(what + ": variable '" + name + "' was not declared");
  const auto& ps = map.partitions(name);
  int64_t total = ps.back().offset + ps.back().count;
  if (count && *count != total)
    return InvalidArgument(what + ": variable '" + name + "' has " + std::to_string(total) +
                           " elements, the tensor given has " + std::to_string(*count));
  *parts = &ps;
  return Status::Ok();
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Status Client::Connect(const ClientOptions& options, std::unique_ptr<Client>* out) {
  if (options.servers.empty()) return InvalidArgument("ps client: no servers given");
  if (options.worker_id < 0)
    return InvalidArgument("ps client: worker id " + std::to_string(options.worker_id) +
                           " is negative");
  if (options.partition_bytes < 4 || options.partition_bytes > options.message_bytes)
    return InvalidArgument("ps client: partition_bytes must be in [4, message_bytes]");
  if (options.message_bytes > (32 << 20))
    return InvalidArgument("ps client: message_bytes above 32 MiB exceeds the servers' limit");
  if (options.max_in_flight < 1) return InvalidArgument("ps client: max_in_flight must be >= 1");
  // Half of it is a gRPC channel argument in milliseconds.
  if (options.stall_timeout < std::chrono::milliseconds(2) ||
      options.stall_timeout > std::chrono::hours(24 * 24))
    return InvalidArgument("ps client: stall_timeout must be at least 2 ms and at most 24 days");
  TlsCredentials tls;
  CADRE_RETURN_IF_ERROR(DeriveTlsCredentials(options.token, &tls).WithContext("ps client"));
  // Mutual TLS (credentials.h): the server must prove it holds the job's credentials before
  // this client sends anything, and proves it only with a certificate of the job's own CA.
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.ca_pem;
  ssl.pem_private_key = tls.key_pem;
  ssl.pem_cert_chain = tls.cert_pem;
  const auto credentials = grpc::SslCredentials(ssl);
  HoldGrpcLibrary();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  // Workers usually start before their servers listen; gRPC's default first reconnect after a
  // refused connection is 1 s (then growing to 120 s). Retry sooner and cap the wait at 2 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetSslTargetNameOverride(kTlsServerName);
  // Liveness (ClientOptions::stall_timeout): keepalive pings while calls are in progress, with no
  // cap on pings between data frames (gRPC's default of 2 would stop them during a sync pull
  // that waits for other workers, which is when a stopped server must still be noticed).
  const auto half =
      std::chrono::duration_cast<std::chrono::milliseconds>(options.stall_timeout / 2);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(half.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(half.count()));
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  for (size_t s = 0; s < options.servers.size(); ++s) {
    // A channel of its own per server and per client, so that workers in one process do not
    // share (and serialise on) one connection.
    args.SetInt("cadre.channel", static_cast<int>(s) * 1000 + options.worker_id);
    auto channel = grpc::CreateCustomChannel(options.servers[s], credentials, args);
    impl->stubs.push_back(
        {proto::ParameterServer::NewStub(channel), std::make_unique<grpc::GenericStub>(channel)});
    impl->channels.push_back(std::move(channel));
  }
  out->reset(new Client(std::move(impl)));
  return Status::Ok();
}

const ShardMap& Client::shard_map() const { return impl_->map; }
int Client::worker_id() const { return impl_->options.worker_id; }

Status Client::Declare(const std::vector<Variable>& variables) {
  Impl& m = *impl_;
  if (m.declared) return MismatchError("ps declare: this client already declared its variables");
  std::vector<VariableShape> shapes;
  for (const Variable& v : variables) {
    for (int64_t d : v.shape)
      if (d < 0) return InvalidArgument("ps declare: variable '" + v.name + "' has a negative dim");
    if (Product(v.shape) > 0 && v.initial == nullptr)
      return InvalidArgument("ps declare: variable '" + v.name + "' has no initial value");
    CADRE_RETURN_IF_ERROR(v.optimizer.Validate().WithContext("ps declare '" + v.name + "'"));
    shapes.push_back({v.name, Product(v.shape)});
  }
  ShardMap map;
  CADRE_RETURN_IF_ERROR(
      ShardMap::Build(shapes, static_cast<int>(m.stubs.size()), m.options.partition_bytes, &map));
  std::vector<Piece> pieces;
  std::map<std::string, const Variable*> by_name;
  for (const Variable& v : variables) {
    by_name[v.name] = &v;
    for (const Partition& p : map.partitions(v.name))
      pieces.push_back({&p, v.initial, nullptr, std::nullopt, std::nullopt});
  }
  std::vector<std::deque<Task>> queues(m.stubs.size());
  auto batches = m.Batches(pieces);
  for (size_t s = 0; s < batches.size(); ++s) {
    for (const auto& batch : batches[s]) {
      auto req = std::make_shared<proto::DeclareRequest>();
      auto rep = std::make_shared<proto::DeclareReply>();
      req->set_worker_id(m.options.worker_id);
      for (const Piece& pc : batch) {
        const Variable& v = *by_name[pc.part->variable];
        proto::DeclarePartition* d = req->add_partitions();
        ToProto(PartitionRef{pc.part->variable, pc.part->index, pc.part->offset, pc.part->count},
                d->mutable_id());
        for (int64_t dim : v.shape) d->add_shape(dim);
        d->set_dtype("float32");
        if (pc.part->count > 0)
          d->set_initial(reinterpret_cast<const char*>(v.initial + pc.part->offset),
                         static_cast<size_t>(pc.part->count) * sizeof(float));
        ToProto(v.optimizer, d->mutable_optimizer());
        d->set_sync(v.sync);
      }
      queues[s].push_back({[req, rep](Stubs& stub, grpc::ClientContext* ctx, DoneFn done) {
                             stub.typed->async()->Declare(ctx, req.get(), rep.get(),
                                                          std::move(done));
                           },
                           [] { return Status::Ok(); }, Describe("declare", batch)});
    }
  }
  Status declared = m.Run(std::move(queues), m.options.connect_timeout, true);
  if (declared.code() == Code::kTimeout || declared.code() == Code::kUnavailable)
    return m.Unreachable(declared);
  CADRE_RETURN_IF_ERROR(declared);
  m.map = std::move(map);
  m.declared = true;
  return Status::Ok();
}

namespace {

std::vector<wire::OutChunk> OutChunks(const std::vector<Piece>& batch) {
  std::vector<wire::OutChunk> out;
  out.reserve(batch.size());
  for (const Piece& pc : batch) {
    const Partition& p = *pc.part;
    out.push_back({p.variable, p.index, p.offset, p.count, pc.src + p.offset, pc.lr, pc.hyper});
  }
  return out;
}

std::vector<wire::InChunk> InChunks(const std::vector<Piece>& batch) {
  std::vector<wire::InChunk> out;
  out.reserve(batch.size());
  for (const Piece& pc : batch) {
    const Partition& p = *pc.part;
    out.push_back({p.variable, p.index, p.count, pc.dst + p.offset});
  }
  return out;
}

// Push and PushPull requests: the payloads are not copied but wrapped where they lie (wire.h),
// and only when the RPC starts, so that the first bytes go out at once. `pins` must outlive the
// RPCs and see WaitReleased() before the caller's tensors may change.
std::vector<std::deque<Task>> PushTasks(const std::vector<std::vector<std::vector<Piece>>>& batches,
                                        const char* method, int32_t worker, int64_t step,
                                        bool reply_values, wire::PayloadPins& pins) {
  std::vector<std::deque<Task>> queues(batches.size());
  for (size_t s = 0; s < batches.size(); ++s) {
    for (const auto& batch : batches[s]) {
      auto req = std::make_shared<grpc::ByteBuffer>();
      auto rep = std::make_shared<grpc::ByteBuffer>();
      Task t;
      t.what = Describe(reply_values ? "push-pull" : "push", batch);
      t.start = [req, rep, batch, method, worker, step, &pins](
                    Stubs& stub, grpc::ClientContext* ctx, DoneFn done) {
        *req = wire::EncodePush(worker, step, OutChunks(batch), pins);
        stub.raw->UnaryCall(ctx, method, {}, req.get(), rep.get(), std::move(done));
      };
      if (reply_values)
        t.finish = [rep, batch] { return wire::DecodePullReply(*rep, InChunks(batch)); };
      else
        t.finish = [] { return Status::Ok(); };
      queues[s].push_back(std::move(t));
    }
  }
  return queues;
}

}  // namespace

Status Client::Impl::RunPushes(const std::vector<Piece>& pieces, const char* method, int64_t step,
                               bool reply_values) {
  wire::PayloadPins pins;
  Status s = Run(PushTasks(Batches(pieces), method, options.worker_id, step, reply_values, pins),
                 options.rpc_timeout, false);
  pins.WaitReleased();  // gRPC holds no slice of the gradients any more
  return s;
}

Status Client::Push(int64_t step, const std::vector<TensorView>& grads) {
  Impl& m = *impl_;
  std::vector<Piece> pieces;
  for (const TensorView& t : grads) {
    const std::vector<Partition>* parts;
    CADRE_RETURN_IF_ERROR(m.Resolve("ps push", t.name, t.count, &parts));
    for (const Partition& p : *parts) pieces.push_back({&p, t.data, nullptr, t.lr, t.hyper});
  }
  return m.RunPushes(pieces, kPushMethod, step, false);
}

Status Client::Pull(int64_t step, const std::vector<MutableTensorView>& out) {
  Impl& m = *impl_;
  std::vector<Piece> pieces;
  for (const MutableTensorView& t : out) {
    const std::vector<Partition>* parts;
    CADRE_RETURN_IF_ERROR(m.Resolve("ps pull", t.name, t.count, &parts));
    for (const Partition& p : *parts)
      pieces.push_back({&p, nullptr, t.data, std::nullopt, std::nullopt});
  }
  std::vector<std::deque<Task>> queues(m.stubs.size());
  auto batches = m.Batches(pieces);
  for (size_t s = 0; s < batches.size(); ++s) {
    for (auto& batch : batches[s]) {
      // The request is a few ids: protobuf encodes it; the reply's values are decoded by hand.
      proto::PullRequest pull;
      pull.set_worker_id(m.options.worker_id);
      pull.set_step(step);
      for (const Piece& pc : batch)
        ToProto(PartitionRef{pc.part->variable, pc.part->index, pc.part->offset, pc.part->count},
                pull.add_ids());
      auto req = std::make_shared<grpc::ByteBuffer>();
      bool own = false;
      if (!grpc::SerializationTraits<proto::PullRequest>::Serialize(pull, req.get(), &own).ok())
        return InternalError("ps pull: cannot encode a request");
      auto rep = std::make_shared<grpc::ByteBuffer>();
      queues[s].push_back({[req, rep](Stubs& stub, grpc::ClientContext* ctx, DoneFn done) {
                             stub.raw->UnaryCall(ctx, kPullMethod, {}, req.get(), rep.get(),
                                                 std::move(done));
                           },
                           [rep, batch] { return wire::DecodePullReply(*rep, InChunks(batch)); },
                           Describe("pull", batch)});
    }
  }
  return m.Run(std::move(queues), m.options.rpc_timeout, false);
}

Status Client::PushPull(int64_t step, const std::vector<TensorView>& grads,
                        const std::vector<MutableTensorView>& out) {
  Impl& m = *impl_;
  if (grads.size() != out.size())
    return InvalidArgument("ps push-pull: " + std::to_string(grads.size()) + " gradients but " +
                           std::to_string(out.size()) + " outputs");
  std::vector<Piece> pieces;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].name != out[i].name || grads[i].count != out[i].count)
      return InvalidArgument("ps push-pull: output " + std::to_string(i) + " ('" + out[i].name +
                             "') does not match gradient '" + grads[i].name + "'");
    const std::vector<Partition>* parts;
    CADRE_RETURN_IF_ERROR(m.Resolve("ps push-pull", grads[i].name, grads[i].count, &parts));
    for (const Partition& p : *parts)
      pieces.push_back({&p, grads[i].data, out[i].data, grads[i].lr, grads[i].hyper});
  }
  return m.RunPushes(pieces, kPushPullMethod, step, true);
}

namespace {

// The part of a whole variable's state vector that one partition holds (none: none).
std::string StateSlice(const std::vector<float>& v, const Partition& p) {
  if (v.empty()) return {};
  return std::string(reinterpret_cast<const char*>(v.data() + p.offset),
                     static_cast<size_t>(p.count) * sizeof(float));
}

}  // namespace

Status Client::GetOptimizerState(int64_t step, const std::vector<std::string>& names,
                                 std::vector<OptimizerState>* out) {
  Impl& m = *impl_;
  std::vector<Piece> pieces;
  std::map<std::string, size_t> index;  // variable -> its position in `names`
  for (size_t i = 0; i < names.size(); ++i) {
    const std::vector<Partition>* parts;
    CADRE_RETURN_IF_ERROR(m.Resolve("ps get state", names[i], std::nullopt, &parts));
    if (!index.emplace(names[i], i).second)
      return InvalidArgument("ps get state: variable '" + names[i] + "' is named twice");
    for (const Partition& p : *parts)
      pieces.push_back({&p, nullptr, nullptr, std::nullopt, std::nullopt});
  }
  out->assign(names.size(), OptimizerState{});  // filled on gRPC's threads, under `mu`
  std::mutex mu;
  std::vector<std::deque<Task>> queues(m.stubs.size());
  auto batches = m.Batches(pieces, 2);  // Adam's state is two values per element
  for (size_t s = 0; s < batches.size(); ++s) {
    for (const auto& batch : batches[s]) {
      auto req = std::make_shared<proto::GetStateRequest>();
      auto rep = std::make_shared<proto::GetStateReply>();
      req->set_worker_id(m.options.worker_id);
      req->set_step(step);
      for (const Piece& pc : batch)
        ToProto(PartitionRef{pc.part->variable, pc.part->index, pc.part->offset, pc.part->count},
                req->add_ids());
      Task t;
      t.what = Describe("get state", batch);
      t.start = [req, rep](Stubs& stub, grpc::ClientContext* ctx, DoneFn done) {
        stub.typed->async()->GetState(ctx, req.get(), rep.get(), std::move(done));
      };
      t.finish = [rep, batch, out, &index, &mu]() -> Status {
        if (rep->states_size() != static_cast<int>(batch.size()))
          return ProtocolError("ps get state: the reply holds " +
                               std::to_string(rep->states_size()) + " partitions, not " +
                               std::to_string(batch.size()));
        for (size_t k = 0; k < batch.size(); ++k) {
          const Partition& p = *batch[k].part;
          OptimizerState got;
          CADRE_RETURN_IF_ERROR(FromProto(rep->states(static_cast<int>(k)), &got));
          const PartitionRef id = FromProto(rep->states(static_cast<int>(k)).id());
          if (id.variable != p.variable || id.index != p.index)
            return ProtocolError("ps get state: the reply's partition " + std::to_string(k) +
                                 " is not '" + p.variable + "' partition " +
                                 std::to_string(p.index));
          for (const auto* v : {&got.buf, &got.sq})
            if (!v->empty() && static_cast<int64_t>(v->size()) != p.count)
              return ProtocolError("ps get state: '" + p.variable + "' partition " +
                                   std::to_string(p.index) + " came back with " +
                                   std::to_string(v->size()) + " values, not " +
                                   std::to_string(p.count));
          std::lock_guard lock(mu);
          OptimizerState& whole = (*out)[index.at(p.variable)];
          const int64_t total = p.offset + p.count;  // grows to the variable's size
          whole.steps = std::max(whole.steps, got.steps);
          for (auto [from, to] : {std::pair{&got.buf, &whole.buf}, std::pair{&got.sq, &whole.sq}}) {
            if (from->empty()) continue;
            if (static_cast<int64_t>(to->size()) < total) to->resize(static_cast<size_t>(total));
            std::copy(from->begin(), from->end(), to->begin() + p.offset);
          }
        }
        return Status::Ok();
      };
      queues[s].push_back(std::move(t));
    }
  }
  CADRE_RETURN_IF_ERROR(m.Run(std::move(queues), m.options.rpc_timeout, false));
  // A variable whose partitions are not all started (none is, or its size) reads as none.
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& parts = m.map.partitions(names[i]);
    const auto total = static_cast<size_t>(parts.back().offset + parts.back().count);
    for (auto* v : {&(*out)[i].buf, &(*out)[i].sq})
      if (v->size() != total) v->clear();
  }
  return Status::Ok();
}

Status Client::SetOptimizerState(const std::vector<std::string>& names,
                                 const std::vector<OptimizerState>& states) {
  Impl& m = *impl_;
  if (names.size() != states.size())
    return InvalidArgument("ps set state: " + std::to_string(names.size()) + " names but " +
                           std::to_string(states.size()) + " states");
  std::vector<Piece> pieces;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::vector<Partition>* parts;
    CADRE_RETURN_IF_ERROR(m.Resolve("ps set state", names[i], std::nullopt, &parts));
    const int64_t count = parts->back().offset + parts->back().count;
    for (const auto* v : {&states[i].buf, &states[i].sq})
      if (!v->empty() && static_cast<int64_t>(v->size()) != count)
        return InvalidArgument("ps set state: variable '" + names[i] + "' has " +
                               std::to_string(count) + " elements, its state " +
                               std::to_string(v->size()));
    for (const Partition& p : *parts)
      pieces.push_back({&p, nullptr, nullptr, std::nullopt, std::nullopt});
  }
  std::map<std::string, const OptimizerState*> by_name;
  for (size_t i = 0; i < names.size(); ++i) by_name[names[i]] = &states[i];
  std::vector<std::deque<Task>> queues(m.stubs.size());
  auto batches = m.Batches(pieces, 2);
  for (size_t s = 0; s < batches.size(); ++s) {
    for (const auto& batch : batches[s]) {
      auto req = std::make_shared<proto::SetStateRequest>();
      auto rep = std::make_shared<proto::SetStateReply>();
      req->set_worker_id(m.options.worker_id);
      req->set_phase(proto::SetStateRequest::STAGE);
      for (const Piece& pc : batch) {
        const Partition& p = *pc.part;
        const OptimizerState& st = *by_name.at(p.variable);
        proto::PartitionState* d = req->add_states();
        ToProto(PartitionRef{p.variable, p.index, p.offset, p.count}, d->mutable_id());
        d->set_steps(st.steps);
        d->set_buf(StateSlice(st.buf, p));
        d->set_sq(StateSlice(st.sq, p));
      }
      queues[s].push_back({[req, rep](Stubs& stub, grpc::ClientContext* ctx, DoneFn done) {
                             stub.typed->async()->SetState(ctx, req.get(), rep.get(),
                                                           std::move(done));
                           },
                           [] { return Status::Ok(); }, Describe("set state", batch)});
    }
  }
  // All or nothing across the servers: every piece is staged first; only when every server
  // accepted its pieces do they all commit.
  const Status staged = m.Run(std::move(queues), m.options.rpc_timeout, false);
  const Status ended = m.EndStaging(staged.ok());
  if (!staged.ok())  // what the others staged was dropped (best effort: it is replaced anyway)
    return Status(staged.code(), staged.message() + " (nothing was changed on any server)");
  if (!ended.ok())
    return ended.WithContext(
        "ps set state: every server accepted the state, but the commit failed on one, so the "
        "servers may now hold different checkpoints: load it again");
  return Status::Ok();
}

Status Client::Impl::EndStaging(bool commit) {
  std::vector<std::deque<Task>> queues(stubs.size());
  for (auto& q : queues) {
    auto req = std::make_shared<proto::SetStateRequest>();
    auto rep = std::make_shared<proto::SetStateReply>();
    req->set_worker_id(options.worker_id);
    req->set_phase(commit ? proto::SetStateRequest::COMMIT : proto::SetStateRequest::DISCARD);
    q.push_back({[req, rep](Stubs& stub, grpc::ClientContext* ctx, DoneFn done) {
                   stub.typed->async()->SetState(ctx, req.get(), rep.get(), std::move(done));
                 },
                 [] { return Status::Ok(); }, commit ? "commit state" : "discard state"});
  }
  return Run(std::move(queues), options.rpc_timeout, false);
}

Status Client::Done() {
  Impl& m = *impl_;
  if (m.done) return Status::Ok();
  std::vector<std::deque<Task>> queues(m.stubs.size());
  for (auto& q : queues) {
    auto req = std::make_shared<proto::DoneRequest>();
    auto rep = std::make_shared<proto::DoneReply>();
    req->set_worker_id(m.options.worker_id);
    q.push_back({[req, rep](Stubs& stub, grpc::ClientContext* ctx, DoneFn done) {
                   stub.typed->async()->WorkerDone(ctx, req.get(), rep.get(), std::move(done));
                 },
                 [] { return Status::Ok(); }, "done"});
  }
  CADRE_RETURN_IF_ERROR(m.Run(std::move(queues), m.options.rpc_timeout, false));
  m.done = true;
  return Status::Ok();
}

}  // namespace cadre::ps
