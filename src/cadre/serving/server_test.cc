#include "cadre/serving/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "cadre/serving/fake_model.h"

namespace cadre::serving {
namespace {

using nlohmann::json;
using testing::FakeModel;
using testing::FakeSignature;

// A ScoringServer for FakeModel on a free loopback port, served by a thread.
class ServerTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options) {
    options.model_name = "fake";
    batcher_ = std::make_unique<Batcher>(model_, BatcherOptions{}, &metrics_);
    server_ = std::make_unique<ScoringServer>(options, signature_, *batcher_, metrics_);
    std::string error;
    port_ = server_->Bind("127.0.0.1", 0, &error);
    ASSERT_GT(port_, 0) << error;
    thread_ = std::thread([this] { server_->Listen(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(60, 0);
    client_->set_connection_timeout(10, 0);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }

  httplib::Result Post(const std::string& path, const std::string& body,
                       httplib::Headers headers = {}) {
    return client_->Post(path.c_str(), headers, body, "application/json");
  }

  FakeModel model_;
  ModelSignature signature_ = FakeSignature(2, {"neg", "pos"});
  Metrics metrics_{32};
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<ScoringServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
  int port_ = 0;
};

const std::string kV2 = R"({"id": "a", "inputs": [{"name": "x", "shape": [2, 2],
    "datatype": "FP32", "data": [1, 2, 3, 4]}]})";
const std::string kWml = R"({"input_data": [{"fields": ["x"], "values": [[[1, -5]]]}]})";

TEST_F(ServerTest, ScoresThroughBothProtocols) {
  Start({});
  auto r = Post("/v2/models/fake/infer", kV2);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json doc = json::parse(r->body);
  EXPECT_EQ(doc["id"], "a");
  EXPECT_EQ(doc["outputs"][0]["data"], json({3.0, 5.0, 7.0, 9.0}));
  r = Post("/ml/v4/deployments/fake/predictions", kWml);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  doc = json::parse(r->body);
  EXPECT_EQ(doc["predictions"][0]["fields"], json({"prediction", "y"}));
  EXPECT_EQ(doc["predictions"][0]["values"][0], json({"neg", {3.0, -9.0}}));
}

TEST_F(ServerTest, APortInUseIsRefused) {
  Start({});
  ScoringServer second(ServerOptions{}, signature_, *batcher_, metrics_);
  std::string error;
  EXPECT_EQ(second.Bind("127.0.0.1", port_, &error), -1);
  EXPECT_NE(error.find("in use"), std::string::npos) << error;
}

TEST_F(ServerTest, AStopRightAfterTheStartIsNotLost) {
  // Stop() before Listen() has begun (a SIGTERM right at start): Listen() returns at once.
  // Without it this test hangs (ctest's timeout ends it).
  Batcher batcher(model_, BatcherOptions{}, &metrics_);
  for (int i = 0; i < 20; ++i) {
    ScoringServer server(ServerOptions{}, signature_, batcher, metrics_);
    std::string error;
    ASSERT_GT(server.Bind("127.0.0.1", 0, &error), 0) << error;
    std::thread listener([&] { server.Listen(); });
    server.Stop();
    listener.join();
  }
}

TEST_F(ServerTest, HealthAndMetadata) {
  ServerOptions options;
  options.device = "cpu";
  Start(options);
  EXPECT_EQ(client_->Get("/v2/health/live")->status, 200);
  EXPECT_EQ(client_->Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(client_->Get("/v2/models/fake/ready")->status, 200);
  auto r = client_->Get("/v2/models/fake");
  ASSERT_EQ(r->status, 200);
  json doc = json::parse(r->body);
  EXPECT_EQ(doc["inputs"][0], json({{"name", "x"}, {"datatype", "FP32"}, {"shape", {-1, 2}}}));
  EXPECT_EQ(doc["outputs"][0]["name"], "y");
  EXPECT_EQ(doc["parameters"]["device"], "cpu");
}

TEST_F(ServerTest, ErrorsAreJsonWithTheRightStatus) {
  ServerOptions options;
  options.max_request_bytes = 4096;
  Start(options);
  auto r = Post("/v2/models/other/infer", kV2);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(json::parse(r->body)["error"].get<std::string>().find("'other' is not served here"),
            std::string::npos);
  r = client_->Get("/nowhere");
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(json::parse(r->body).contains("error"));
  r = Post("/v2/models/fake/infer", R"({"inputs": [{"name": "x", "shape": [1, 3],
      "datatype": "FP32", "data": [1, 2, 3]}]})");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("the model expects [-1, 2]"), std::string::npos) << r->body;
  r = Post("/ml/v4/deployments/fake/predictions", R"({"values": []})");
  EXPECT_EQ(r->status, 400);
  json wml = json::parse(r->body);
  EXPECT_EQ(wml["status_code"], 400);
  EXPECT_EQ(wml["errors"][0]["code"], "invalid_input_data");
  EXPECT_NE(wml["errors"][0]["message"].get<std::string>().find("input_data: missing"),
            std::string::npos);
  r = Post("/v2/models/fake/infer", std::string(5000, ' '));
  EXPECT_EQ(r->status, 413);
  EXPECT_TRUE(json::parse(r->body).contains("error"));
  // The connection and the server are still good.
  EXPECT_EQ(Post("/v2/models/fake/infer", kV2)->status, 200);
}

// A loopback connection to `port` that has sent `request` (when not empty); -1 if it could
// not. Reads on it give up after 30 s.
int SendOn(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

// The next answer on `fd` (headers and the body of its Content-Length, which may come in
// separate segments); empty when the server closed the connection without one.
std::string ReadAnswer(int fd) {
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) {
    answer.append(buf, static_cast<size_t>(n));
    size_t end = answer.find("\r\n\r\n");
    if (end == std::string::npos) continue;
    size_t length = answer.find("Content-Length: ");
    size_t body = length < end ? std::stoul(answer.substr(length + 16)) : 0;
    if (answer.size() >= end + 4 + body) break;
  }
  return answer;
}

// The first answer the server gives on one raw connection after `request`: for what
// cpp-httplib's client cannot send, such as Expect: 100-continue.
std::string RawAnswer(int port, const std::string& request) {
  int fd = SendOn(port, request);
  if (fd < 0) return "";
  std::string answer = ReadAnswer(fd);
  close(fd);
  return answer;
}

// A keep-alive v2 request of one row [v, -v]; FakeModel answers [2v + 1, -2v + 1].
std::string KeepAliveInfer(int v) {
  std::string body =
      json({{"inputs",
             {{{"name", "x"}, {"shape", {1, 2}}, {"datatype", "FP32"}, {"data", {v, -v}}}}}})
          .dump();
  return "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string AnswerData(const std::string& answer) {
  size_t body = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.1 200 ", 0) != 0 || body == std::string::npos) return answer;
  return json::parse(answer.substr(body + 4))["outputs"][0]["data"].dump();
}

TEST_F(ServerTest, AStopAnswersEveryRequestAlreadySentAndClosesIdleConnections) {
  // Keep-alive clients predicting when the stop (SIGTERM) comes: one request inside the model,
  // one queued for it, two sent on connections still waiting for an HTTP thread, and an idle
  // keep-alive connection. cpp-httplib's own stop closed the waiting connections unread (those
  // predictions were lost), and held the exit for the idle one's keep-alive timeout.
  ServerOptions options;
  options.http_threads = 3;
  Start(options);
  std::vector<int> busy;  // connections that answered once, and will send another request
  for (int v = 0; v < 2; ++v) {
    busy.push_back(SendOn(port_, KeepAliveInfer(v)));
    ASSERT_GE(busy.back(), 0);
    EXPECT_EQ(AnswerData(ReadAnswer(busy.back())), json({2.0 * v + 1, -2.0 * v + 1}).dump());
  }
  int idle = SendOn(port_, KeepAliveInfer(7));
  ASSERT_GE(idle, 0);
  EXPECT_EQ(AnswerData(ReadAnswer(idle)), "[15.0,-13.0]");

  model_.Close();
  std::vector<int> pending;  // connections with a request sent and not answered
  for (int v = 10; v < 12; ++v) {
    ASSERT_GT(send(busy[v - 10], KeepAliveInfer(v).data(), KeepAliveInfer(v).size(), 0), 0);
    pending.push_back(busy[v - 10]);
    // Three answered above, then one request inside (the next is not batched with it).
    if (v == 10) {
      ASSERT_TRUE(model_.WaitEntered(4));
    }
  }
  for (int i = 0; i < 3000 && batcher_->queued_rows() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(batcher_->queued_rows(), 1);  // the other one, queued behind it
  for (int v = 12; v < 14; ++v) {         // every HTTP thread is taken: these wait
    pending.push_back(SendOn(port_, KeepAliveInfer(v)));
    ASSERT_GE(pending.back(), 0);
  }

  server_->Stop();
  model_.Open();
  for (size_t i = 0; i < pending.size(); ++i) {
    int v = 10 + static_cast<int>(i);
    std::string answer = ReadAnswer(pending[i]);
    EXPECT_EQ(AnswerData(answer), json({2.0 * v + 1, -2.0 * v + 1}).dump()) << "request " << v;
    EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
    EXPECT_EQ(ReadAnswer(pending[i]), "");  // then the connection is closed
    close(pending[i]);
  }
  EXPECT_EQ(ReadAnswer(idle), "");  // closed, without an answer to a request never sent
  close(idle);
  thread_.join();  // Listen() returned (without it, ctest's timeout ends this test)
  EXPECT_LT(SendOn(port_, KeepAliveInfer(1)), 0);
}

TEST_F(ServerTest, OversizedBodiesAre413HoweverTheyAreSent) {
  ServerOptions options;
  options.max_request_bytes = 4096;
  Start(options);
  // curl sends Expect: 100-continue with any body over 1 MiB: the refusal is the answer.
  std::string answer = RawAnswer(port_,
                                 "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\n"
                                 "Content-Type: application/json\r\nContent-Length: 40000000\r\n"
                                 "Expect: 100-continue\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 413 ", 0), 0u) << answer;
  EXPECT_NE(answer.find("larger than this server takes"), std::string::npos) << answer;
  EXPECT_NE(answer.find("Content-Length: "), std::string::npos) << answer;
  // No length at all (curl -X POST without data): 411 at once, not after the read timeout.
  answer = RawAnswer(port_, "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 411 ", 0), 0u) << answer;
  // A chunked body has no length to refuse it by: it is cut off at the limit.
  int sent = 0;
  auto r = client_->Post(
      "/ml/v4/deployments/fake/predictions",
      [&](size_t, httplib::DataSink& sink) {
        std::string chunk(1000, ' ');
        if (sent++ < 10) return sink.write(chunk.data(), chunk.size());
        sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 413) << r->body;
  EXPECT_EQ(json::parse(r->body)["errors"][0]["code"], "payload_too_large");
  EXPECT_EQ(Post("/v2/models/fake/infer", kV2)->status, 200);
}

TEST_F(ServerTest, AFormIsReadAsJsonAndAMultipartFormIs415) {
  Start({});
  // `curl -d @payload.json` without a Content-Type sends the JSON as a form.
  auto r = client_->Post("/v2/models/fake/infer", kV2, "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  // `curl -F payload=@payload.json` sends a multipart form.
  r = client_->Post(
      "/v2/models/fake/infer",
      httplib::MultipartFormDataItems{{"payload", kV2, "payload.json", "application/json"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415) << r->body;
  EXPECT_NE(r->body.find("Content-Type: application/json"), std::string::npos) << r->body;
  EXPECT_EQ(Post("/v2/models/fake/infer", kV2)->status, 200);
}

TEST_F(ServerTest, AModelErrorIs500AndTheNextRequestIsServed) {
  Start({});
  auto r = Post("/v2/models/fake/infer", R"({"inputs": [{"name": "x", "shape": [1, 2],
      "datatype": "FP32", "data": [-999, 0]}]})");
  EXPECT_EQ(r->status, 500);
  EXPECT_NE(r->body.find("the fake model refuses -999"), std::string::npos) << r->body;
  EXPECT_EQ(Post("/v2/models/fake/infer", kV2)->status, 200);
  std::string metrics = client_->Get("/metrics")->body;
  EXPECT_NE(metrics.find(R"(cadre_serving_requests_total{route="v2_infer",code="500"} 1)"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(cadre_serving_requests_total{route="v2_infer",code="200"} 1)"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(cadre_serving_errors_total{route="v2_infer"} 1)"), std::string::npos);
  EXPECT_NE(metrics.find("cadre_serving_batch_rows_count 2"), std::string::npos);
  EXPECT_NE(metrics.find("cadre_serving_queue_rows 0"), std::string::npos);
}

TEST_F(ServerTest, ATokenIsRequiredWhenSet) {
  ServerOptions options;
  options.token = "s3cret";
  Start(options);
  EXPECT_EQ(client_->Get("/v2/health/live")->status, 200);
  auto r = Post("/v2/models/fake/infer", kV2);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("missing bearer token"), std::string::npos);
  EXPECT_EQ(Post("/v2/models/fake/infer", kV2, {{"Authorization", "Bearer nope"}})->status, 401);
  EXPECT_EQ(Post("/v2/models/fake/infer", kV2, {{"Authorization", "Bearer s3cret"}})->status, 200);
}

TEST_F(ServerTest, ManyClientsAtOnceEachGetTheirAnswer) {
  Start({});
  std::vector<std::thread> clients;
  std::vector<int> wrong(16, 0);
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", port_);
      client.set_read_timeout(60, 0);
      for (int i = 0; i < 20; ++i) {
        float v = float(c * 1000 + i);
        json body = {
            {"inputs",
             {{{"name", "x"}, {"shape", {1, 2}}, {"datatype", "FP32"}, {"data", {v, -v}}}}}};
        auto r = client.Post("/v2/models/fake/infer", body.dump(), "application/json");
        if (!r || r->status != 200 ||
            json::parse(r->body)["outputs"][0]["data"] != json({2.0 * v + 1, -2.0 * v + 1})) {
          ++wrong[c];
          ADD_FAILURE() << "client " << c << " request " << i << ": "
                        << (r ? std::to_string(r->status) + " " + r->body
                              : httplib::to_string(r.error()));
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(wrong, std::vector<int>(16, 0));
}

}  // namespace
}  // namespace cadre::serving
