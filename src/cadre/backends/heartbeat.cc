#include "cadre/backends/heartbeat.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "cadre/store/tcp_store.h"

namespace cadre::backends {

std::string HeartbeatKey(int rank) { return "cadre/heartbeat/" + std::to_string(rank); }
std::string HeartbeatNodeKey(int rank) {
  return "cadre/heartbeat/" + std::to_string(rank) + "/node";
}

std::chrono::milliseconds HeartbeatPeriod(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 6, std::chrono::milliseconds(200), std::chrono::milliseconds(10000));
}

TaskHeartbeat::TaskHeartbeat(Options options) : options_(std::move(options)) {
  if (options_.timeout.count() > 0) thread_ = std::thread([this] { Run(); });
}

TaskHeartbeat::~TaskHeartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<std::string> TaskHeartbeat::runner_lost() {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

void TaskHeartbeat::Run() {
  using Clock = std::chrono::steady_clock;
  const auto period = HeartbeatPeriod(options_.timeout);
  auto answered = Clock::now();  // the runner was there when it started this task
  std::unique_ptr<store::TcpStore> client;
  std::string last_error;
  bool node_said = false;
  for (;;) {
    const auto started = Clock::now();
    try {
      if (!client) {
        store::TcpStoreOptions o;
        const size_t colon = options_.store_address.rfind(':');
        o.host = options_.store_address.substr(0, colon);
        o.port = static_cast<uint16_t>(std::stoi(options_.store_address.substr(colon + 1)));
        o.token = options_.token;
        o.identity = options_.identity + " (heartbeat)";
        o.connect_timeout = period;
        o.timeout = period;
        client = std::make_unique<store::TcpStore>(o);
      }
      if (!node_said) {
        client->set(HeartbeatNodeKey(options_.rank),
                    store::Bytes(options_.node.begin(), options_.node.end()));
        node_said = true;
      }
      client->add(HeartbeatKey(options_.rank), 1);
      answered = Clock::now();
    } catch (const std::exception& e) {
      // The client reconnects by itself on its next call; a client that never connected is
      // made again.
      last_error = e.what();
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!lost_ && Clock::now() - answered > options_.timeout) {
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%.1f",
                    std::chrono::duration<double>(Clock::now() - answered).count());
      lost_ = "cadre run's rendezvous store at " + options_.store_address +
              " has answered no heartbeat for " + seconds +
              " s (--heartbeat-timeout): cadre run was killed, or its machine or the network to "
              "it was lost; the last error: " +
              last_error;
    }
    if (wake_.wait_until(lock, started + period, [this] { return stop_; })) return;
  }
}

void HeartbeatWatch::Observe(int rank, int64_t count, Clock::time_point now) {
  auto [it, added] = seen_.try_emplace(rank, Seen{count, now});
  if (!added && it->second.count != count) it->second = Seen{count, now};
}

std::vector<int> HeartbeatWatch::Silent(Clock::time_point now) const {
  std::vector<int> silent;
  for (const auto& [rank, seen] : seen_) {
    if (seen.count > 0 && now - seen.changed > timeout_) silent.push_back(rank);
  }
  return silent;
}

std::vector<int> HeartbeatWatch::Settled(std::vector<int> silent) {
  bool grew = false;
  for (int rank : silent) {
    grew = grew || std::find(last_silent_.begin(), last_silent_.end(), rank) == last_silent_.end();
  }
  last_silent_ = silent;
  if (grew) return {};
  return silent;
}

}  // namespace cadre::backends
