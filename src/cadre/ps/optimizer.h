// Server-side optimizers: the update a parameter server applies to one partition of a variable
// once a step's gradient is known. The arithmetic mirrors torch.optim (SGD with momentum,
// dampening and Nesterov; Adam with bias correction; weight decay added to the gradient), so a
// PyTorch model trained through the servers follows the same trajectory as a local one.
//
// An Optimizer object holds the per-partition state (momentum buffer, Adam moments and step
// count); it is not thread-safe: the caller (the partition's owner) serialises Apply calls.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::ps {

enum class OptimizerKind { kSgd, kMomentum, kAdam, kSum };

// Parses "sgd", "momentum", "adam", "sum".
Status ParseOptimizerKind(const std::string& name, OptimizerKind* kind);
std::string OptimizerKindName(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;

  // Rejects values torch would reject (negative lr, betas outside [0, 1), ...), naming the field.
  Status Validate() const;
  bool operator==(const OptimizerConfig&) const = default;
};

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, int64_t count);

  // Updates `param` in place with `grad` (same length as the count given at construction).
  // kSum adds the gradient to the value (lr and the rest are ignored): a plain accumulator.
  void Apply(std::span<float> param, std::span<const float> grad);

  int64_t steps() const { return steps_; }

 private:
  OptimizerConfig config_;
  int64_t steps_ = 0;
  std::vector<float> buf_;  // momentum buffer, or Adam's first moment
  std::vector<float> sq_;   // Adam's second moment
};

}  // namespace cadre::ps
