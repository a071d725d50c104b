// The parameter server over real gRPC on loopback, with threads as workers.
#include <gtest/gtest.h>

#include <thread>

#include "cadre/ps/client.h"
#include "cadre/ps/credentials.h"
#include "cadre/ps/proto_util.h"
#include "cadre/ps/server.h"

namespace cadre::ps {
namespace {

constexpr const char* kToken = "test-token";

struct Cluster {
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::string> addresses;

  Cluster(int num_servers, int num_workers, Duration step_timeout = std::chrono::seconds(60)) {
    for (int i = 0; i < num_servers; ++i) {
      ServerOptions o;
      o.address = "127.0.0.1:0";
      o.num_workers = num_workers;
      o.token = kToken;
      o.step_timeout = step_timeout;
      std::unique_ptr<Server> s;
      Status st = Server::Start(o, &s);
      EXPECT_TRUE(st.ok()) << st.ToString();
      addresses.push_back("127.0.0.1:" + std::to_string(s->port()));
      servers.push_back(std::move(s));
    }
  }

  std::unique_ptr<Client> Connect(int worker, int64_t partition_bytes = 1 << 20) {
    ClientOptions o;
    o.servers = addresses;
    o.worker_id = worker;
    o.token = kToken;
    o.partition_bytes = partition_bytes;
    o.message_bytes = std::max<int64_t>(partition_bytes * 3, 4096);
    o.max_in_flight = 2;
    o.rpc_timeout = std::chrono::seconds(60);
    o.connect_timeout = std::chrono::seconds(30);
    std::unique_ptr<Client> c;
    Status st = Client::Connect(o, &c);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return c;
  }
};

Variable Var(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& init,
             OptimizerKind kind, bool sync = true) {
  Variable v;
  v.name = name;
  v.shape = std::move(shape);
  v.initial = init.data();
  v.optimizer.kind = kind;
  v.optimizer.lr = 0.1f;
  v.sync = sync;
  return v;
}

void Check(const Status& s) { ASSERT_TRUE(s.ok()) << s.ToString(); }

// A raw channel with the credentials of the job whose token is `token`.
std::shared_ptr<grpc::Channel> JobChannel(const std::string& address, const std::string& token) {
  TlsCredentials tls;
  EXPECT_TRUE(DeriveTlsCredentials(token, &tls).ok());
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls.ca_pem;
  o.pem_private_key = tls.key_pem;
  o.pem_cert_chain = tls.cert_pem;
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(kTlsServerName);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(o), args);
}

// Sync: each step is applied once with the mean of all workers' gradients, whatever the worker
// count, and the large variable is split over both servers and reassembled.
TEST(PsServerTest, SyncAggregatesExactlyOncePerStep) {
  for (int workers : {1, 2, 3}) {
    SCOPED_TRACE("workers=" + std::to_string(workers));
    Cluster cluster(2, workers);
    const int64_t n = 3000;  // 12000 bytes: 3 partitions of <= 4 KiB
    const int steps = 4;
    std::vector<float> init(n);
    for (int64_t i = 0; i < n; ++i) init[static_cast<size_t>(i)] = static_cast<float>(i);
    std::vector<float> bias_init{1.0f};
    std::vector<std::thread> threads;
    std::vector<std::vector<float>> finals(static_cast<size_t>(workers));
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        auto client = cluster.Connect(w, 4096);
        Check(client->Declare({Var("w", {30, 100}, init, OptimizerKind::kSgd),
                               Var("b", {1}, bias_init, OptimizerKind::kSum)}));
        EXPECT_EQ(client->shard_map().partitions("w").size(), 3u);
        std::vector<float> value(n), bias(1);
        Check(client->Pull(0, {{"w", value.data(), n}, {"b", bias.data(), 1}}));
        EXPECT_EQ(value, init);
        for (int s = 0; s < steps; ++s) {
          // Worker w's gradient is (w + 1) * (i + 1): the mean over workers is (W + 1) / 2 * (i +
          // 1).
          std::vector<float> grad(n), bgrad{static_cast<float>(w + 1)};
          for (int64_t i = 0; i < n; ++i) grad[static_cast<size_t>(i)] = (w + 1.0f) * (i + 1.0f);
          Check(client->PushPull(s, {{"w", grad.data(), n}, {"b", bgrad.data(), 1}},
                                 {{"w", value.data(), n}, {"b", bias.data(), 1}}));
        }
        finals[static_cast<size_t>(w)] = value;
        finals[static_cast<size_t>(w)].push_back(bias[0]);
        Check(client->Done());
      });
    }
    for (auto& t : threads) t.join();
    const float mean_factor = (workers + 1) / 2.0f;
    const float sum_per_step = workers * (workers + 1) / 2.0f;
    for (const auto& f : finals) {
      ASSERT_EQ(f.size(), static_cast<size_t>(n + 1));
      for (int64_t i = 0; i < n; i += 97)
        EXPECT_NEAR(f[static_cast<size_t>(i)], i - steps * 0.1f * mean_factor * (i + 1.0f),
                    1e-2f * (i + 1));
      EXPECT_FLOAT_EQ(f[static_cast<size_t>(n)], 1.0f + steps * sum_per_step);
    }
    for (auto& s : cluster.servers) {
      EXPECT_TRUE(s->WaitAllDone(Deadline(std::chrono::seconds(10))).ok());
      for (int32_t p = 0; p < 3; ++p) {
        int64_t step = s->state().PartitionStep("w", p);
        EXPECT_TRUE(step == -1 || step == steps) << "partition " << p << " at step " << step;
      }
    }
  }
}

// Async: every push is applied on arrival; with the sum optimizer the result is order-free.
TEST(PsServerTest, AsyncAppliesEveryPush) {
  Cluster cluster(1, 2);
  std::vector<float> init{0, 0, 0, 0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      auto client = cluster.Connect(w);
      Check(client->Declare({Var("acc", {4}, init, OptimizerKind::kSum, false)}));
      std::vector<float> g{1, 2, 3, static_cast<float>(w)}, out(4);
      for (int s = 0; s < 25; ++s)
        Check(client->PushPull(s, {{"acc", g.data(), 4}}, {{"acc", out.data(), 4}}));
      Check(client->Done());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(cluster.servers[0]->state().PartitionStep("acc", 0), 50);
  auto client = cluster.Connect(0);
  Check(client->Declare({Var("acc", {4}, init, OptimizerKind::kSum, false)}));
  std::vector<float> out(4);
  Check(client->Pull(0, {{"acc", out.data(), 4}}));
  EXPECT_EQ(out, (std::vector<float>{50, 100, 150, 25}));
}

// A large tensor pushed through many pipelined RPCs over two servers comes back intact.
TEST(PsServerTest, PartitionedRoundTrip) {
  Cluster cluster(2, 1);
  const int64_t n = (3 << 20) / 4 + 7;  // 3 MiB + 7 floats, 1 MiB partitions
  std::vector<float> init(n);
  for (int64_t i = 0; i < n; ++i) init[static_cast<size_t>(i)] = static_cast<float>(i % 1000);
  auto client = cluster.Connect(0);
  Check(client->Declare({Var("big", {n}, init, OptimizerKind::kSum)}));
  EXPECT_EQ(client->shard_map().partitions("big").size(), 4u);
  EXPECT_GT(client->shard_map().server_bytes()[0], 0);
  EXPECT_GT(client->shard_map().server_bytes()[1], 0);
  std::vector<float> ones(n, 1.0f), out(n);
  Check(client->PushPull(0, {{"big", ones.data(), n}}, {{"big", out.data(), n}}));
  for (int64_t i = 0; i < n; i += 4099)
    ASSERT_EQ(out[static_cast<size_t>(i)], init[static_cast<size_t>(i)] + 1);
  EXPECT_EQ(out.back(), init.back() + 1);
}

// Raw requests, as a buggy or hostile client would send them.
class PsBadInputTest : public ::testing::Test {
 protected:
  PsBadInputTest() : cluster_(1, 2, std::chrono::milliseconds(300)) {
    stub_ = proto::ParameterServer::NewStub(JobChannel(cluster_.addresses[0], kToken));
    auto client = cluster_.Connect(0);
    std::vector<float> init{1, 2, 3, 4, 5, 6};
    Check(client->Declare({Var("w", {2, 3}, init, OptimizerKind::kSgd)}));
  }

  grpc::Status Push(proto::PushRequest req) {
    grpc::ClientContext ctx;
    proto::PushReply rep;
    return stub_->Push(&ctx, req, &rep);
  }

  proto::PushRequest GoodPush() {
    proto::PushRequest req;
    req.set_worker_id(0);
    req.set_step(0);
    proto::TensorChunk* c = req.add_grads();
    ToProto(PartitionRef{"w", 0, 0, 6}, c->mutable_id());
    c->set_dtype("float32");
    std::vector<float> g(6, 1.0f);
    c->set_data(reinterpret_cast<const char*>(g.data()), 24);
    return req;
  }

  void ExpectUnchanged() {
    ServerState& s = cluster_.servers[0]->state();
    EXPECT_EQ(s.PartitionStep("w", 0), 0);
    // Worker 0 has contributed nothing yet: its good push is accepted exactly once.
    grpc::Status ok = Push(GoodPush());
    EXPECT_TRUE(ok.ok()) << ok.error_message();
    EXPECT_EQ(Push(GoodPush()).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  }

  Cluster cluster_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
};

TEST_F(PsBadInputTest, ClientsWithoutTheJobsCredentialsAreNotServed) {
  // Without credentials, or with another job's, the connection ends in the TLS handshake:
  // UNAVAILABLE, not UNAUTHENTICATED (which would mean the server read the request first).
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> strangers;
  strangers.push_back(proto::ParameterServer::NewStub(
      grpc::CreateChannel(cluster_.addresses[0], grpc::InsecureChannelCredentials())));
  strangers.push_back(proto::ParameterServer::NewStub(JobChannel(cluster_.addresses[0], "guess")));
  for (auto& stub : strangers) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    proto::PushReply rep;
    EXPECT_EQ(stub->Push(&ctx, GoodPush(), &rep).error_code(), grpc::StatusCode::UNAVAILABLE);
    grpc::ClientContext done_ctx;
    done_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    proto::DoneRequest req;
    proto::DoneReply done;
    EXPECT_EQ(stub->WorkerDone(&done_ctx, req, &done).error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  ExpectUnchanged();
}

TEST_F(PsBadInputTest, UnknownVariableIsNotFound) {
  proto::PushRequest req = GoodPush();
  req.mutable_grads(0)->mutable_id()->set_variable("nope");
  grpc::Status st = Push(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("'nope'"), std::string::npos) << st.error_message();
  ExpectUnchanged();
}

TEST_F(PsBadInputTest, ShapeOrDtypeMismatchIsInvalid) {
  proto::PushRequest req = GoodPush();
  req.mutable_grads(0)->mutable_data()->resize(20);
  EXPECT_EQ(Push(req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req = GoodPush();
  req.mutable_grads(0)->mutable_id()->set_count(5);
  EXPECT_EQ(Push(req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req = GoodPush();
  req.mutable_grads(0)->set_dtype("float64");
  grpc::Status st = Push(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("float64"), std::string::npos) << st.error_message();
  // Re-declaring with another shape is refused too.
  grpc::ClientContext ctx;
  proto::DeclareRequest decl;
  proto::DeclarePartition* p = decl.add_partitions();
  ToProto(PartitionRef{"w", 0, 0, 4}, p->mutable_id());
  p->add_shape(4);
  p->set_dtype("float32");
  p->set_initial(std::string(16, '\0'));
  p->mutable_optimizer()->set_kind("sgd");
  p->set_sync(true);
  proto::DeclareReply rep;
  EXPECT_EQ(stub_->Declare(&ctx, decl, &rep).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectUnchanged();
}

TEST_F(PsBadInputTest, WorkerOutsideTheJobIsInvalid) {
  proto::PushRequest req = GoodPush();
  req.set_worker_id(2);
  grpc::Status st = Push(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("worker id 2"), std::string::npos) << st.error_message();
  req.set_worker_id(-1);
  EXPECT_EQ(Push(req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectUnchanged();
}

TEST_F(PsBadInputTest, StepTimeoutNamesMissingWorker) {
  auto client = cluster_.Connect(0);
  std::vector<float> init{1, 2, 3, 4, 5, 6}, g(6, 1.0f), out(6);
  Check(client->Declare({Var("w", {2, 3}, init, OptimizerKind::kSgd)}));
  Status st = client->PushPull(0, {{"w", g.data(), 6}}, {{"w", out.data(), 6}});
  EXPECT_EQ(st.code(), Code::kTimeout);
  EXPECT_NE(st.message().find("workers missing: 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("ps server 0"), std::string::npos) << st.message();
}

TEST(PsClientTest, UnreachableServerFailsWithinTheTimeout) {
  ClientOptions o;
  o.servers = {"127.0.0.1:1"};
  o.token = kToken;
  o.connect_timeout = std::chrono::milliseconds(500);
  std::unique_ptr<Client> c;
  Check(Client::Connect(o, &c));
  std::vector<float> init{0};
  Status st = c->Declare({Var("w", {1}, init, OptimizerKind::kSgd)});
  EXPECT_EQ(st.code(), Code::kTimeout) << st.ToString();
  EXPECT_NE(st.message().find("127.0.0.1:1"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace cadre::ps
