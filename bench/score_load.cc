// score_load: the measuring half of bench/score.py (the scoring benchmark of issue 15).
//
//   score_load http HOST PORT PATH BODY_FILE CONCURRENCY REQUESTS
//       CONCURRENCY keep-alive connections, each POSTing BODY_FILE in turn, REQUESTS in all.
//   score_load echo BODY_FILE RESPONSE_BYTES REQUESTS
//       one connection to an in-process server that answers RESPONSE_BYTES: one loopback HTTP
//       round trip of the scorer's payload sizes, with no model and no JSON.
//   score_load bare MODEL_DIR BATCH ITERATIONS
//       libtorch's own forward of BATCH rows of zeros, ITERATIONS times, one thread: no HTTP,
//       no JSON, no batcher.
//
// Each prints one JSON line: {"requests", "errors", "seconds", "per_second", "p50_ms", "p99_ms"}
// (for bare: per_second counts rows).
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cadre/serving/signature.h"
#include "cadre/serving/torch_model.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Report(std::vector<double> latencies_ms, int64_t count, int errors, double seconds) {
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto pct = [&](double p) {
    if (latencies_ms.empty()) return 0.0;
    return latencies_ms[std::min(
        latencies_ms.size() - 1,
        static_cast<size_t>(p * static_cast<double>(latencies_ms.size())))];
  };
  std::printf(
      "{\"requests\": %zu, \"errors\": %d, \"seconds\": %.4f, \"per_second\": %.2f, "
      "\"p50_ms\": %.4f, \"p99_ms\": %.4f}\n",
      latencies_ms.size(), errors, seconds, static_cast<double>(count) / seconds, pct(0.5),
      pct(0.99));
}

int Http(const std::string& host, int port, const std::string& path, const std::string& body,
         int concurrency, int requests) {
  std::atomic<int> next{0}, errors{0};
  std::vector<std::vector<double>> lat(static_cast<size_t>(concurrency));
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < concurrency; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client client(host, port);
      client.set_keep_alive(true);
      // Headers and body go in two writes: without this each request's body waits for the
      // server's delayed ACK (40 ms), and the client, not the server, is what gets measured.
      client.set_tcp_nodelay(true);
      client.set_read_timeout(120, 0);
      while (next++ < requests) {
        auto t0 = Clock::now();
        auto r = client.Post(path.c_str(), body, "application/json");
        if (!r || r->status != 200) ++errors;
        lat[static_cast<size_t>(c)].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    });
  }
  for (auto& t : threads) t.join();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  Report(all, static_cast<int64_t>(all.size()), errors, seconds);
  return 0;
}

int Echo(const std::string& body, size_t response_bytes, int requests) {
  httplib::Server server;
  std::string answer(response_bytes, 'x');
  server.Post("/echo", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(answer, "application/json");
  });
  server.set_tcp_nodelay(true);
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { server.listen_after_bind(); });
  httplib::Client client("127.0.0.1", port);
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);
  std::vector<double> lat;
  int errors = 0;
  auto start = Clock::now();
  for (int i = 0; i < requests; ++i) {
    auto t0 = Clock::now();
    auto r = client.Post("/echo", body, "application/json");
    if (!r || r->status != 200) ++errors;
    lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  server.stop();
  serving.join();
  Report(lat, requests, errors, seconds);
  return 0;
}

int Bare(const std::string& dir, int64_t batch, int iterations) {
  using namespace cadre::serving;
  ModelSignature sig;
  std::string device;
  std::unique_ptr<Model> model;
  cadre::Status s = LoadSignature(dir, &sig);
  if (s.ok()) s = ResolveDevice("cpu", &device);
  ConfigureTorchThreads(static_cast<int>(std::thread::hardware_concurrency()), 0);
  if (s.ok()) s = LoadTorchModel(dir, sig, device, &model);
  if (!s.ok()) {
    std::cerr << "score_load: " << s.ToString() << "\n";
    return 1;
  }
  std::vector<HostTensor> inputs;
  for (const TensorSpec& spec : sig.inputs) {
    HostTensor t{spec.dtype, spec.shape, {}};
    t.shape[0] = batch;
    t.data.assign(static_cast<size_t>(t.elements()) * ElementSize(t.dtype), std::byte{0});
    inputs.push_back(std::move(t));
  }
  for (int i = 0; i < 3; ++i) model->Forward(inputs);  // warm up
  std::vector<double> lat;
  auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    model->Forward(inputs);
    lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Report(lat, batch * iterations, 0, seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 7 && a[0] == "http") {
    return Http(a[1], std::stoi(a[2]), a[3], ReadFile(a[4]), std::stoi(a[5]), std::stoi(a[6]));
  }
  if (a.size() == 4 && a[0] == "echo") {
    return Echo(ReadFile(a[1]), std::stoul(a[2]), std::stoi(a[3]));
  }
  if (a.size() == 4 && a[0] == "bare") return Bare(a[1], std::stoll(a[2]), std::stoi(a[3]));
  std::cerr << "usage: score_load http HOST PORT PATH BODY_FILE CONCURRENCY REQUESTS\n"
               "       score_load echo BODY_FILE RESPONSE_BYTES REQUESTS\n"
               "       score_load bare MODEL_DIR BATCH ITERATIONS\n";
  return 2;
}
