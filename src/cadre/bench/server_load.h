// The HTTP load of `cadre bench server`, generated in the bench's own process (so its CPU cost
// is paid on the same machine as the server's, and is reported beside it):
//  - ClosedLoopLoad: N clients, each its own keep-alive connection and thread, sending the same
//    GET back to back for a fixed time; every answer's latency is kept.
//  - BackgroundLoad: a service's everyday load while a job trains: status GETs at a fixed rate
//    (open loop: the schedule does not wait for slow answers) and clients following a log.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace cadre::bench {

struct HttpTarget {
  std::string url;  // "http://127.0.0.1:8900"
  std::string token;
};

struct LoadResult {
  int64_t requests = 0;  // answered 200 inside the measured window
  int64_t errors = 0;    // anything else (connection failures, other statuses)
  double seconds = 0;    // the measured window
  std::vector<uint32_t> latencies_us;

  double rate() const { return seconds > 0 ? requests / seconds : 0; }
  // q in [0, 1]; 0 when there are no samples. Sorts latencies_us.
  double PercentileMs(double q);
};

// `clients` threads GET `path` for warmup_s (not counted) and then duration_s.
LoadResult ClosedLoopLoad(const HttpTarget& target, const std::string& path, int clients,
                          double warmup_s, double duration_s);

// Starts at construction, stops (and joins) at Stop() or destruction. Followers end by
// themselves when the followed job ends.
class BackgroundLoad {
 public:
  BackgroundLoad(const HttpTarget& target, const std::string& status_path, double rate_per_s,
                 const std::string& logs_path, int followers);
  ~BackgroundLoad();
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

  void Stop();
  int64_t status_requests() const { return status_requests_; }
  int64_t status_errors() const { return status_errors_; }
  int64_t log_bytes() const { return log_bytes_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> status_requests_{0}, status_errors_{0}, log_bytes_{0};
  std::vector<std::thread> threads_;
};

}  // namespace cadre::bench
