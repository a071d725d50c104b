// The parameter-server channel's authentication (credentials.h) over real gRPC on loopback: the
// job token never crosses the wire, a stranger is refused before its request is read, a worker
// talks to no server that cannot prove it belongs to the job, and an empty token starts nothing.
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <atomic>
#include <thread>

#include "cadre/net/socket.h"
#include "cadre/ps/client.h"
#include "cadre/ps/credentials.h"
#include "cadre/ps/proto_util.h"
#include "cadre/ps/server.h"

namespace cadre::ps {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "auth-test-token-0123456789abcdef";

std::unique_ptr<Server> StartServer(const std::string& token = kToken) {
  ServerOptions o;
  o.address = "127.0.0.1:0";
  o.token = token;
  std::unique_ptr<Server> s;
  Status st = Server::Start(o, &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

std::unique_ptr<Client> ConnectClient(const std::string& address, Duration connect_timeout) {
  ClientOptions o;
  o.servers = {address};
  o.token = kToken;
  o.connect_timeout = connect_timeout;
  o.rpc_timeout = connect_timeout;
  std::unique_ptr<Client> c;
  Status st = Client::Connect(o, &c);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return c;
}

Variable OneFloat(const std::vector<float>& init) {
  Variable v;
  v.name = "w";
  v.shape = {static_cast<int64_t>(init.size())};
  v.initial = init.data();
  v.optimizer.kind = OptimizerKind::kSum;
  return v;
}

X509* ParseCert(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return x;
}

// True when `cert_pem` chains to `ca_pem` for TLS use.
bool Verifies(const std::string& ca_pem, const std::string& cert_pem) {
  X509* ca = ParseCert(ca_pem);
  X509* cert = ParseCert(cert_pem);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  bool ok = ca && cert && X509_STORE_add_cert(store, ca) == 1 &&
            X509_STORE_CTX_init(ctx, store, cert, nullptr) == 1 && X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  X509_free(cert);
  X509_free(ca);
  return ok;
}

TEST(PsCredentialsTest, EveryHolderOfTheTokenDerivesTheSameJobCredentials) {
  TlsCredentials a, b, other;
  ASSERT_TRUE(DeriveTlsCredentials(kToken, &a).ok());
  ASSERT_TRUE(DeriveTlsCredentials(kToken, &b).ok());
  ASSERT_TRUE(DeriveTlsCredentials("another job's token", &other).ok());
  EXPECT_EQ(a.ca_pem, b.ca_pem);
  EXPECT_EQ(a.cert_pem, b.cert_pem);
  EXPECT_EQ(a.key_pem, b.key_pem);
  EXPECT_NE(a.ca_pem, other.ca_pem);
  EXPECT_NE(a.key_pem, other.key_pem);
  EXPECT_TRUE(Verifies(a.ca_pem, a.cert_pem));
  EXPECT_FALSE(Verifies(a.ca_pem, other.cert_pem));  // another job's member is not ours
  for (const std::string* pem : {&a.ca_pem, &a.cert_pem, &a.key_pem}) {
    EXPECT_EQ(pem->find(kToken), std::string::npos);  // the token itself appears nowhere
  }
  EXPECT_EQ(DeriveTlsCredentials("", &a).code(), Code::kInvalidArgument);
}

TEST(PsAuthTest, AnEmptyTokenStartsNeitherServerNorClient) {
  ServerOptions so;
  so.address = "127.0.0.1:0";
  std::unique_ptr<Server> server;
  Status st = Server::Start(so, &server);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("no job token"), std::string::npos) << st.message();
  ClientOptions co;
  co.servers = {"127.0.0.1:1"};
  std::unique_ptr<Client> client;
  st = Client::Connect(co, &client);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
}

TEST(PsAuthTest, APlaintextPeerGetsNoHttp2Answer) {
  // An HTTP/2 client preface and an empty SETTINGS frame, as any gRPC client without TLS sends.
  // A server that answered with its own SETTINGS frame would be reading plaintext requests.
  auto server = StartServer();
  net::Socket s;
  ASSERT_TRUE(
      net::Socket::Connect("127.0.0.1", static_cast<uint16_t>(server->port()), Deadline(10s), &s)
          .ok());
  const std::string preface = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                              std::string("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);
  ASSERT_TRUE(s.SendAll(preface.data(), preface.size(), Deadline(10s)).ok());
  std::string answer;
  Deadline deadline(30s);
  for (;;) {
    uint8_t byte;
    if (!s.RecvAll(&byte, 1, deadline).ok()) break;  // closed (or, at worst, silent)
    answer.push_back(static_cast<char>(byte));
    if (answer.size() >= 9) break;
  }
  const bool settings = answer.size() >= 9 && answer[3] == '\x04';
  EXPECT_FALSE(settings) << "the server speaks plaintext HTTP/2";
}

TEST(PsAuthTest, AConnectionThatSaysNothingIsClosedAfterTheHandshakeTimeout) {
  ServerOptions o;
  o.address = "127.0.0.1:0";
  o.token = kToken;
  o.handshake_timeout = 300ms;
  std::unique_ptr<Server> server;
  ASSERT_TRUE(Server::Start(o, &server).ok());
  net::Socket silent;
  ASSERT_TRUE(net::Socket::Connect("127.0.0.1", static_cast<uint16_t>(server->port()),
                                   Deadline(10s), &silent)
                  .ok());
  uint8_t byte;
  // Well before gRPC's own 120 s: the server hangs up on it.
  Status closed = silent.RecvAll(&byte, 1, Deadline(60s));
  EXPECT_EQ(closed.code(), Code::kIo) << closed.ToString();
}

TEST(PsAuthTest, AStrangersLargeRequestIsRefusedBeforeItIsRead) {
  // 30 MiB from a client without the job's credentials: refused by the TLS handshake
  // (UNAVAILABLE), not read in full and then refused (UNAUTHENTICATED).
  auto server = StartServer();
  auto stub = proto::ParameterServer::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));
  proto::PushRequest req;
  proto::TensorChunk* c = req.add_grads();
  c->mutable_id()->set_variable("w");
  c->set_dtype("float32");
  c->mutable_data()->resize(30 << 20);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  proto::PushReply rep;
  grpc::Status st = stub->Push(&ctx, req, &rep);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
}

// Stands in for whatever took a learner's port 2222 first: it records every call it gets.
class Squatter final : public proto::ParameterServer::Service {
 public:
  grpc::Status Declare(grpc::ServerContext* ctx, const proto::DeclareRequest*,
                       proto::DeclareReply*) override {
    calls++;
    for (const auto& [key, value] : ctx->client_metadata()) {
      if (std::string(value.data(), value.size()).find(kToken) != std::string::npos) leaked++;
    }
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
  std::atomic<int> leaked{0};
};

TEST(PsAuthTest, AWorkerTellsNothingToAServerThatCannotProveItIsTheJobs) {
  struct Case {
    const char* what;
    std::shared_ptr<grpc::ServerCredentials> credentials;
  };
  TlsCredentials other;
  ASSERT_TRUE(DeriveTlsCredentials("another job's token", &other).ok());
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_root_certs = other.ca_pem;
  ssl.pem_key_cert_pairs.push_back({other.key_pem, other.cert_pem});
  for (const Case& c : {Case{"plaintext", grpc::InsecureServerCredentials()},
                        Case{"another job's TLS", grpc::SslServerCredentials(ssl)}}) {
    SCOPED_TRACE(c.what);
    Squatter squatter;
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", c.credentials, &port);
    builder.RegisterService(&squatter);
    std::unique_ptr<grpc::Server> fake = builder.BuildAndStart();
    ASSERT_TRUE(fake && port != 0);
    auto client = ConnectClient("127.0.0.1:" + std::to_string(port), 2s);
    std::vector<float> init{1.0f};
    Status st = client->Declare({OneFloat(init)});
    EXPECT_FALSE(st.ok()) << "the worker accepted a server without the job's credentials";
    EXPECT_NE(st.message().find("this job's credentials"), std::string::npos) << st.ToString();
    EXPECT_EQ(squatter.calls.load(), 0);
    EXPECT_EQ(squatter.leaked.load(), 0);
    fake->Shutdown(std::chrono::system_clock::now() + 1s);
  }
}

TEST(PsAuthTest, MembersOfTheJobWorkTogether) {
  auto server = StartServer();
  auto client = ConnectClient("127.0.0.1:" + std::to_string(server->port()), 30s);
  std::vector<float> init{1.0f, 2.0f}, grad{0.5f, 0.5f}, out(2);
  ASSERT_TRUE(client->Declare({OneFloat(init)}).ok());
  Status st = client->PushPull(0, {{"w", grad.data(), 2}}, {{"w", out.data(), 2}});
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out, (std::vector<float>{1.5f, 2.5f}));
  ASSERT_TRUE(client->Done().ok());
  EXPECT_TRUE(server->WaitAllDone(Deadline(10s)).ok());
}

}  // namespace
}  // namespace cadre::ps
