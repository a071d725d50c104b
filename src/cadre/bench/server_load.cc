#include "cadre/bench/server_load.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

namespace cadre::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<httplib::Client> Connect(const HttpTarget& target) {
  auto client = std::make_unique<httplib::Client>(target.url);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  client->set_connection_timeout(10);
  client->set_read_timeout(30);
  return client;
}

httplib::Headers Auth(const HttpTarget& target) {
  return {{"Authorization", "Bearer " + target.token}};
}

}  // namespace

double LoadResult::PercentileMs(double q) {
  if (latencies_us.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * latencies_us.size()));
  rank = std::clamp<size_t>(rank, 1, latencies_us.size()) - 1;
  std::nth_element(latencies_us.begin(), latencies_us.begin() + static_cast<ptrdiff_t>(rank),
                   latencies_us.end());
  return latencies_us[rank] / 1000.0;
}

LoadResult ClosedLoopLoad(const HttpTarget& target, const std::string& path, int clients,
                          double warmup_s, double duration_s) {
  struct PerClient {
    int64_t requests = 0, errors = 0;
    std::vector<uint32_t> latencies_us;
  };
  std::vector<PerClient> per(static_cast<size_t>(clients));
  auto begin = Clock::now() + std::chrono::milliseconds(100);  // every thread made first
  auto measure_from =
      begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup_s));
  auto end = measure_from +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration_s));
  std::vector<std::thread> threads;
  for (auto& mine : per) {
    threads.emplace_back([&target, &path, &mine, begin, measure_from, end] {
      auto client = Connect(target);
      httplib::Headers headers = Auth(target);
      mine.latencies_us.reserve(1 << 16);
      std::this_thread::sleep_until(begin);
      for (;;) {
        auto sent = Clock::now();
        if (sent >= end) break;
        auto res = client->Get(path.c_str(), headers);
        auto answered = Clock::now();
        if (sent < measure_from || answered > end) continue;
        if (res && res->status == 200) {
          ++mine.requests;
          mine.latencies_us.push_back(static_cast<uint32_t>(
              std::chrono::duration_cast<std::chrono::microseconds>(answered - sent).count()));
        } else {
          ++mine.errors;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  LoadResult out;
  out.seconds = duration_s;
  for (auto& p : per) {
    out.requests += p.requests;
    out.errors += p.errors;
    out.latencies_us.insert(out.latencies_us.end(), p.latencies_us.begin(), p.latencies_us.end());
  }
  return out;
}

BackgroundLoad::BackgroundLoad(const HttpTarget& target, const std::string& status_path,
                               double rate_per_s, const std::string& logs_path, int followers) {
  if (rate_per_s > 0) {
    threads_.emplace_back([this, target, status_path, rate_per_s] {
      auto client = Connect(target);
      httplib::Headers headers = Auth(target);
      auto period = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(1.0 / rate_per_s));
      auto next = Clock::now();
      while (!stop_) {
        auto res = client->Get(status_path.c_str(), headers);
        ++(res && res->status == 200 ? status_requests_ : status_errors_);
        next += period;
        std::this_thread::sleep_until(next);
      }
    });
  }
  for (int i = 0; i < followers; ++i) {
    threads_.emplace_back([this, target, logs_path] {
      int64_t lines = 0;
      // A quiet log holds the response open with nothing to read: a read timeout only makes
      // the follower reconnect from the last line it saw, as a real client would.
      while (!stop_) {
        auto client = Connect(target);
        client->set_read_timeout(2);
        std::string path = logs_path + "&follow=true&since=" + std::to_string(lines);
        auto res =
            client->Get(path.c_str(), Auth(target), [this, &lines](const char* data, size_t n) {
              log_bytes_ += static_cast<int64_t>(n);
              lines += std::count(data, data + n, '\n');
              return !stop_;
            });
        if (res && res->status == 200) break;  // the stream ended with the job
        if (res) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // refused
      }
    });
  }
}

void BackgroundLoad::Stop() {
  stop_ = true;
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

BackgroundLoad::~BackgroundLoad() { Stop(); }

}  // namespace cadre::bench
