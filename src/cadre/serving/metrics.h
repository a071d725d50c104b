// Metrics: the scorer's counters in Prometheus' text format (GET /metrics): requests and errors
// per route and status code, request latency, batch sizes, and the queue depth.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace cadre::serving {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Appends NAME_bucket{le=..}, NAME_sum and NAME_count lines (`labels` inside the braces).
  void Render(const std::string& name, std::string* out) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  explicit Metrics(int64_t max_batch_size);

  void CountRequest(const std::string& route, int status, double seconds);
  void CountBatch(int64_t rows, double seconds);
  void SetQueueDepth(int64_t rows);

  std::string Render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (route, status) -> count
  Histogram latency_;
  Histogram batch_rows_;
  Histogram batch_seconds_;
  int64_t queue_depth_ = 0;
};

}  // namespace cadre::serving
