#include "cadre/serving/batcher.h"

#include <algorithm>
#include <future>

namespace cadre::serving {

struct Batcher::Request {
  std::vector<HostTensor> inputs;
  int64_t rows = 0;
  std::chrono::steady_clock::time_point arrived;
  std::promise<Status> done;
  std::vector<HostTensor> outputs;  // written before `done` is set

  // Whether `other` can share a batch with this request: the same row shape for every input.
  bool Fits(const Request& other) const {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& a = inputs[i].shape;
      const auto& b = other.inputs[i].shape;
      if (inputs[i].dtype != other.inputs[i].dtype || a.size() != b.size() ||
          !std::equal(a.begin() + 1, a.end(), b.begin() + 1)) {
        return false;
      }
    }
    return true;
  }
};

Batcher::Batcher(Model& model, BatcherOptions options, Metrics* metrics)
    : model_(model), options_(options), metrics_(metrics) {
  int n = std::max(1, options_.threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
}

Batcher::~Batcher() { Stop(); }

Status Batcher::Infer(std::vector<HostTensor> inputs, std::vector<HostTensor>* outputs) {
  if (inputs.empty() || inputs[0].rows() < 1) {
    return InvalidArgument("a request needs at least one row");
  }
  auto request = std::make_shared<Request>();
  request->rows = inputs[0].rows();
  request->inputs = std::move(inputs);
  request->arrived = std::chrono::steady_clock::now();
  std::future<Status> result = request->done.get_future();
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Status(Code::kUnavailable, "the model is being stopped");
    queue_.push_back(request);
    queued_rows_ += request->rows;
    if (metrics_) metrics_->SetQueueDepth(queued_rows_);
  }
  // With a delay, a thread may be waiting for this request to fill its batch: wake them all.
  if (options_.max_batch_delay.count() > 0) {
    work_.notify_all();
  } else {
    work_.notify_one();
  }
  if (result.wait_for(options_.request_timeout) != std::future_status::ready) {
    return TimeoutError("the model did not answer within " +
                        std::to_string(options_.request_timeout.count()) + " ms");
  }
  Status status = result.get();
  if (status.ok()) *outputs = std::move(request->outputs);
  return status;
}

void Batcher::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

int64_t Batcher::queued_rows() const {
  std::lock_guard lock(mu_);
  return queued_rows_;
}

Batcher::Batch Batcher::TakeBatch(std::unique_lock<std::mutex>& lock) {
  const int64_t max_rows = std::max<int64_t>(1, options_.max_batch_size);
  if (options_.max_batch_delay.count() > 0) {
    auto deadline = queue_.front()->arrived + options_.max_batch_delay;
    work_.wait_until(lock, deadline,
                     [&] { return stopping_ || queue_.empty() || queued_rows_ >= max_rows; });
  }
  Batch batch;
  int64_t rows = 0;
  while (!queue_.empty()) {
    const auto& next = queue_.front();
    if (!batch.empty() && (rows + next->rows > max_rows || !batch[0]->Fits(*next))) break;
    rows += next->rows;
    batch.push_back(next);
    queue_.pop_front();
  }
  queued_rows_ -= rows;
  if (metrics_) metrics_->SetQueueDepth(queued_rows_);
  return batch;
}

void Batcher::Loop() {
  std::unique_lock lock(mu_);
  while (true) {
    work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    Batch batch = TakeBatch(lock);
    if (batch.empty()) continue;  // another thread took them while this one waited
    if (!queue_.empty()) work_.notify_one();
    lock.unlock();
    Run(batch);
    lock.lock();
  }
}

void Batcher::RunOne(Request& request) {
  auto start = std::chrono::steady_clock::now();
  Status status;
  try {
    request.outputs = model_.Forward(request.inputs);
  } catch (const std::exception& e) {
    status = InternalError(std::string("the model failed: ") + e.what());
  }
  // Counted before the caller is released: a client that reads /metrics right after its answer
  // must see its own batch (as Run does for whole batches).
  if (metrics_) {
    metrics_->CountBatch(
        request.rows,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  request.done.set_value(std::move(status));
}

void Batcher::Run(const Batch& batch) {
  if (batch.size() == 1) return RunOne(*batch[0]);
  std::vector<HostTensor> inputs;
  int64_t rows = 0;
  for (const auto& r : batch) rows += r->rows;
  std::vector<const HostTensor*> parts(batch.size());
  for (size_t i = 0; i < batch[0]->inputs.size(); ++i) {
    for (size_t b = 0; b < batch.size(); ++b) parts[b] = &batch[b]->inputs[i];
    inputs.push_back(ConcatRows(parts));
  }
  auto start = std::chrono::steady_clock::now();
  std::vector<HostTensor> outputs;
  try {
    outputs = model_.Forward(inputs);
  } catch (const std::exception&) {
    outputs.clear();
  }
  bool whole = !outputs.empty() && std::all_of(outputs.begin(), outputs.end(),
                                               [&](const auto& o) { return o.rows() == rows; });
  if (!whole) {
    // Find the request at fault: each runs alone and gets its own answer or error.
    for (const auto& r : batch) RunOne(*r);
    return;
  }
  if (metrics_) {
    metrics_->CountBatch(
        rows, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  int64_t begin = 0;
  for (const auto& r : batch) {
    r->outputs.clear();
    for (const HostTensor& out : outputs) r->outputs.push_back(SliceRows(out, begin, r->rows));
    begin += r->rows;
    r->done.set_value(Status::Ok());
  }
}

}  // namespace cadre::serving
