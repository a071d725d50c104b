// FakeModel (tests only): output = 2 * input + 1 per element (FP32 in, FP32 out), one output of
// the input's shape. Records the rows of every batch; throws ModelError for a batch holding the
// value -999; with `gate` closed, Forward waits (bounded) until the test opens it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "cadre/serving/model.h"
#include "cadre/serving/signature.h"

namespace cadre::serving::testing {

class FakeModel final : public Model {
 public:
  std::vector<HostTensor> Forward(const std::vector<HostTensor>& inputs) override {
    {
      std::unique_lock lock(mu_);
      ++entered_;
      changed_.notify_all();
      changed_.wait_for(lock, std::chrono::seconds(30), [&] { return open_; });
      batches_.push_back(inputs[0].rows());
    }
    HostTensor out = inputs[0];
    for (int64_t i = 0; i < out.elements(); ++i) {
      double v = ElementAsDouble(out, i);
      if (v == -999) throw ModelError("the fake model refuses -999");
      SetElementFromDouble(out, i, 2 * v + 1);
    }
    return {out};
  }
  std::string device() const override { return "cpu"; }

  void Close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  // Waits (at most 30 s) until Forward has been entered `n` times in all.
  bool WaitEntered(int n) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [&] { return entered_ >= n; });
  }
  std::vector<int64_t> batches() {
    std::lock_guard lock(mu_);
    return batches_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool open_ = true;
  int entered_ = 0;
  std::vector<int64_t> batches_;
};

// The signature FakeModel answers: input "x" FP32 [-1, width], output "y" FP32 [-1, width].
inline ModelSignature FakeSignature(int64_t width, std::vector<std::string> labels = {}) {
  ModelSignature sig;
  sig.inputs = {{"x", DataType::kFp32, {-1, width}}};
  sig.outputs = {{"y", DataType::kFp32, {-1, width}}};
  sig.labels = std::move(labels);
  return sig;
}

inline HostTensor Rows(std::vector<std::vector<float>> rows) {
  HostTensor t;
  t.dtype = DataType::kFp32;
  t.shape = {static_cast<int64_t>(rows.size()),
             rows.empty() ? 0 : static_cast<int64_t>(rows[0].size())};
  t.data.resize(static_cast<size_t>(t.elements()) * 4);
  int64_t i = 0;
  for (const auto& r : rows) {
    for (float v : r) SetElementFromDouble(t, i++, v);
  }
  return t;
}

}  // namespace cadre::serving::testing
