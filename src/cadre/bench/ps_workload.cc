#include "cadre/bench/ps_workload.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "cadre/ps/client.h"
#include "cadre/ps/server.h"
#include "cadre/ps/shard_map.h"

namespace cadre::bench {

using ps::Client;
using ps::ClientOptions;
using ps::OptimizerKind;
using ps::Server;
using ps::ServerOptions;
using ps::ShardMap;
using ps::Variable;

namespace {

constexpr char kVariable[] = "bench";

Status CheckConfig(const PsBenchConfig& config) {
  if (config.servers < 1 || config.workers < 1 || config.bytes < 4 || config.iterations < 1)
    return InvalidArgument("bench ps: servers, workers, iterations must be >= 1, bytes >= 4");
  return Status::Ok();
}

// One worker's whole run over a connected client: declare, warm up, time the steps, done.
Status WorkerSteps(const PsBenchConfig& config, Client& client, std::vector<double>* times) {
  const int64_t count = config.bytes / 4;
  std::vector<float> init(static_cast<size_t>(count), 0.0f);
  Variable v;
  v.name = kVariable;
  v.shape = {count};
  v.initial = init.data();
  v.optimizer.kind = OptimizerKind::kSum;
  CADRE_RETURN_IF_ERROR(client.Declare({v}));
  std::vector<float> grad(static_cast<size_t>(count), 1e-6f), value(static_cast<size_t>(count));
  for (int i = 0; i <= config.iterations; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    CADRE_RETURN_IF_ERROR(
        client.PushPull(i, {{kVariable, grad.data(), count}}, {{kVariable, value.data(), count}})
            .WithContext("step " + std::to_string(i)));
    std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (i > 0) times->push_back(dt.count());  // step 0 warms up
  }
  return client.Done();
}

}  // namespace

Status RunPsBench(const PsBenchConfig& config, PsBenchResult* out) {
  CADRE_RETURN_IF_ERROR(CheckConfig(config));
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
  // times[w]: worker w's timed steps.
  std::vector<std::vector<double>> times(static_cast<size_t>(config.workers));
  std::mutex mu;
  Status failure;
  std::vector<std::thread> threads;
  for (int w = 0; w < config.workers; ++w) {
    threads.emplace_back([&, w] {
      ClientOptions o;
      o.servers = addresses;
      o.worker_id = w;
      o.token = token;
      std::unique_ptr<Client> client;
      Status s = Client::Connect(o, &client);
      if (s.ok()) s = WorkerSteps(config, *client, &times[static_cast<size_t>(w)]);
      if (!s.ok()) {
        std::lock_guard lock(mu);
        if (failure.ok()) failure = s.WithContext("worker " + std::to_string(w));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : servers) s->Shutdown();
  CADRE_RETURN_IF_ERROR(failure);
  return SummarizePsBench(config, times, out);
}

Status RunPsBenchServer(const PsBenchConfig& config, const std::string& address,
                        const std::string& token, Duration timeout) {
  CADRE_RETURN_IF_ERROR(CheckConfig(config));
  ServerOptions o;
  o.address = address;
  o.num_workers = config.workers;
  o.token = token;
  o.step_timeout = timeout;
  std::unique_ptr<Server> server;
  CADRE_RETURN_IF_ERROR(Server::Start(o, &server));
  Status s = server->WaitAllDone(Deadline(timeout));
  server->Shutdown();
  return s.WithContext("bench ps server on " + address);
}

Status RunPsBenchWorker(const PsBenchConfig& config, const std::vector<std::string>& servers,
                        int worker, const std::string& token, Duration timeout,
                        std::vector<double>* step_seconds) {
  CADRE_RETURN_IF_ERROR(CheckConfig(config));
  if (worker < 0 || worker >= config.workers)
    return InvalidArgument("bench ps: worker " + std::to_string(worker) + " is outside 0.." +
                           std::to_string(config.workers - 1));
  ClientOptions o;
  o.servers = servers;
  o.worker_id = worker;
  o.token = token;
  o.rpc_timeout = timeout;
  o.connect_timeout = timeout;
  std::unique_ptr<Client> client;
  CADRE_RETURN_IF_ERROR(Client::Connect(o, &client));
  step_seconds->clear();
  return WorkerSteps(config, *client, step_seconds)
      .WithContext("bench ps worker " + std::to_string(worker));
}

Status SummarizePsBench(const PsBenchConfig& config,
                        const std::vector<std::vector<double>>& step_seconds, PsBenchResult* out) {
  CADRE_RETURN_IF_ERROR(CheckConfig(config));
  if (step_seconds.size() != static_cast<size_t>(config.workers))
    return InvalidArgument("bench ps: step times of " + std::to_string(step_seconds.size()) +
                           " workers, expected " + std::to_string(config.workers));
  std::vector<double> step(static_cast<size_t>(config.iterations), 0.0);
  for (size_t w = 0; w < step_seconds.size(); ++w) {
    if (step_seconds[w].size() != step.size())
      return InvalidArgument("bench ps: worker " + std::to_string(w) + " timed " +
                             std::to_string(step_seconds[w].size()) + " steps, expected " +
                             std::to_string(step.size()));
    for (size_t i = 0; i < step.size(); ++i) step[i] = std::max(step[i], step_seconds[w][i]);
  }
  std::sort(step.begin(), step.end());
  PsBenchResult r;
  r.config = config;
  r.step_seconds = step[step.size() / 2];
  r.aggregate_gbps = static_cast<double>(config.workers) * static_cast<double>(config.bytes) * 8 /
                     r.step_seconds / 1e9;
  *out = r;
  return Status::Ok();
}

double PsBenchLinkBoundSeconds(const PsBenchConfig& config, double rate_bits_per_s) {
  ShardMap map;
  int64_t busiest_server = config.bytes;  // should the map fail: as if one server held it all
  if (ShardMap::Build({{kVariable, config.bytes / 4}}, config.servers,
                      ClientOptions{}.partition_bytes, &map)
          .ok()) {
    const auto& b = map.server_bytes();
    busiest_server = *std::max_element(b.begin(), b.end());
  }
  double link_bytes =
      std::max<double>(static_cast<double>(config.bytes),
                       static_cast<double>(config.workers) * static_cast<double>(busiest_server));
  return link_bytes * 8 / rate_bits_per_s;
}

}  // namespace cadre::bench
