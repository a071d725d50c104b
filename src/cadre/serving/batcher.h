// Batcher: dynamic batching in front of a Model, as Triton's dynamic batcher does.
//
// Callers (HTTP handler threads) `Infer` one request of any number of rows and block until its
// answer. A pool of inference threads takes what is waiting: a batch is the requests at the head
// of the queue whose rows add up to at most `max_batch_size` (a larger request runs alone) and
// whose row shapes agree. With `max_batch_delay` > 0 a thread that finds fewer rows waits up to
// that long after the oldest request arrived for more; with 0 it batches only what is already
// waiting, so a lone request is never delayed. Each caller gets exactly its own rows back.
//
// A model that fails on a batch of several requests is run again on each request alone, so only
// the request at fault gets the error (kInternal, the model's message) and the others their
// answers. Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/serving/metrics.h"
#include "cadre/serving/model.h"

namespace cadre::serving {

struct BatcherOptions {
  int64_t max_batch_size = 32;  // rows; 1 turns batching off
  std::chrono::microseconds max_batch_delay{0};
  int threads = 1;  // inference threads
  std::chrono::milliseconds request_timeout{std::chrono::minutes(5)};
};

class Batcher {
 public:
  // `model` and `metrics` (may be null) must outlive the Batcher.
  Batcher(Model& model, BatcherOptions options, Metrics* metrics);
  ~Batcher();  // Stop()

  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Runs `inputs` (one tensor per model input, equal rows >= 1) through the model. Errors:
  // kInternal (the model failed on this request), kUnavailable (stopping), kTimeout.
  Status Infer(std::vector<HostTensor> inputs, std::vector<HostTensor>* outputs);

  // New requests get kUnavailable; those already queued are still run; returns once the
  // inference threads have exited.
  void Stop();

  int64_t queued_rows() const;
  const BatcherOptions& options() const { return options_; }

 private:
  struct Request;
  using Batch = std::vector<std::shared_ptr<Request>>;

  void Loop();
  Batch TakeBatch(std::unique_lock<std::mutex>& lock);
  void Run(const Batch& batch);
  void RunOne(Request& request);

  Model& model_;
  const BatcherOptions options_;
  Metrics* const metrics_;

  mutable std::mutex mu_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<Request>> queue_;  // GUARDED_BY(mu_)
  int64_t queued_rows_ = 0;                     // GUARDED_BY(mu_)
  bool stopping_ = false;                       // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace cadre::serving
