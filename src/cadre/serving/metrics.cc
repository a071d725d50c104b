#include "cadre/serving/metrics.h"

#include <algorithm>
#include <cstdio>

namespace cadre::serving {
namespace {

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::vector<double> PowersOfTwo(int64_t max) {
  std::vector<double> b;
  for (int64_t v = 1; v < max; v *= 2) b.push_back(static_cast<double>(v));
  b.push_back(static_cast<double>(std::max<int64_t>(max, 1)));
  return b;
}

const std::vector<double> kSeconds = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                      0.1,    0.2,   0.5,   1,     2,    5,    10};

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Render(const std::string& name, std::string* out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    *out +=
        name + "_bucket{le=\"" + Number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  *out += name + "_sum " + Number(sum_) + "\n";
  *out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics(int64_t max_batch_size)
    : latency_(kSeconds), batch_rows_(PowersOfTwo(max_batch_size)), batch_seconds_(kSeconds) {}

void Metrics::CountRequest(const std::string& route, int status, double seconds) {
  std::lock_guard lock(mu_);
  ++requests_[{route, status}];
  latency_.Observe(seconds);
}

void Metrics::CountBatch(int64_t rows, double seconds) {
  std::lock_guard lock(mu_);
  batch_rows_.Observe(static_cast<double>(rows));
  batch_seconds_.Observe(seconds);
}

void Metrics::SetQueueDepth(int64_t rows) {
  std::lock_guard lock(mu_);
  queue_depth_ = rows;
}

std::string Metrics::Render() const {
  std::lock_guard lock(mu_);
  std::string out;
  out += "# HELP cadre_serving_requests_total Requests answered, by route and HTTP status.\n";
  out += "# TYPE cadre_serving_requests_total counter\n";
  std::map<std::string, uint64_t> errors;
  for (const auto& [key, n] : requests_) {
    out += "cadre_serving_requests_total{route=\"" + key.first + "\",code=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
    if (key.second >= 400) errors[key.first] += n;
  }
  out += "# HELP cadre_serving_errors_total Requests answered with a 4xx or 5xx status.\n";
  out += "# TYPE cadre_serving_errors_total counter\n";
  for (const auto& [route, n] : errors) {
    out += "cadre_serving_errors_total{route=\"" + route + "\"} " + std::to_string(n) + "\n";
  }
  out += "# HELP cadre_serving_request_seconds Time from request to answer.\n";
  out += "# TYPE cadre_serving_request_seconds histogram\n";
  latency_.Render("cadre_serving_request_seconds", &out);
  out += "# HELP cadre_serving_batch_rows Rows in each batch the model ran.\n";
  out += "# TYPE cadre_serving_batch_rows histogram\n";
  batch_rows_.Render("cadre_serving_batch_rows", &out);
  out += "# HELP cadre_serving_batch_seconds Time the model took for one batch.\n";
  out += "# TYPE cadre_serving_batch_seconds histogram\n";
  batch_seconds_.Render("cadre_serving_batch_seconds", &out);
  out += "# HELP cadre_serving_queue_rows Rows waiting for an inference thread.\n";
  out += "# TYPE cadre_serving_queue_rows gauge\n";
  out += "cadre_serving_queue_rows " + std::to_string(queue_depth_) + "\n";
  return out;
}

}  // namespace cadre::serving
