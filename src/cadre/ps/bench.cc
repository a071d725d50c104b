#include "cadre/ps/bench.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "cadre/ps/client.h"
#include "cadre/ps/server.h"

namespace cadre::ps {

Status RunPsBench(const BenchConfig& config, BenchResult* out) {
  if (config.servers < 1 || config.workers < 1 || config.bytes < 4 || config.iterations < 1)
    return InvalidArgument("bench ps: servers, workers, iterations must be >= 1, bytes >= 4");
  const std::string token = "bench";
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < config.servers; ++s) {
    ServerOptions o;
    o.address = config.host + ":0";
    o.num_workers = config.workers;
    o.token = token;
    std::unique_ptr<Server> server;
    CADRE_RETURN_IF_ERROR(Server::Start(o, &server));
    addresses.push_back(config.host + ":" + std::to_string(server->port()));
    servers.push_back(std::move(server));
  }
  const int64_t count = config.bytes / 4;
  std::vector<float> init(static_cast<size_t>(count), 0.0f);
  // steps[w][i]: worker w's time for step i.
  std::vector<std::vector<double>> times(static_cast<size_t>(config.workers));
  std::mutex mu;
  Status failure;
  std::vector<std::thread> threads;
  for (int w = 0; w < config.workers; ++w) {
    threads.emplace_back([&, w] {
      auto fail = [&](const Status& s) {
        std::lock_guard lock(mu);
        if (failure.ok()) failure = s.WithContext("worker " + std::to_string(w));
      };
      ClientOptions o;
      o.servers = addresses;
      o.worker_id = w;
      o.token = token;
      std::unique_ptr<Client> client;
      Status s = Client::Connect(o, &client);
      Variable v;
      v.name = "bench";
      v.shape = {count};
      v.initial = init.data();
      v.optimizer.kind = OptimizerKind::kSum;
      if (s.ok()) s = client->Declare({v});
      std::vector<float> grad(static_cast<size_t>(count), 1e-6f), value(static_cast<size_t>(count));
      for (int i = 0; s.ok() && i <= config.iterations; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        s = client->PushPull(i, {{"bench", grad.data(), count}}, {{"bench", value.data(), count}});
        std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        if (i > 0) times[static_cast<size_t>(w)].push_back(dt.count());  // step 0 warms up
      }
      if (s.ok()) s = client->Done();
      if (!s.ok()) fail(s);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : servers) s->Shutdown();
  CADRE_RETURN_IF_ERROR(failure);
  std::vector<double> step(static_cast<size_t>(config.iterations), 0.0);
  for (const auto& per_worker : times)
    for (size_t i = 0; i < per_worker.size(); ++i) step[i] = std::max(step[i], per_worker[i]);
  std::sort(step.begin(), step.end());
  BenchResult r;
  r.config = config;
  r.step_seconds = step[step.size() / 2];
  r.aggregate_gbps = static_cast<double>(config.workers) * static_cast<double>(config.bytes) * 8 /
                     r.step_seconds / 1e9;
  *out = r;
  return Status::Ok();
}

}  // namespace cadre::ps
