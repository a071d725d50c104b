// Server-side optimizers: the update a parameter server applies to one partition of a variable
// once a step's gradient is known. The arithmetic mirrors torch.optim (SGD with momentum,
// dampening and Nesterov; Adam with bias correction; weight decay added to the gradient), so a
// PyTorch model trained through the servers follows the same trajectory as a local one.
//
// An Optimizer object holds the per-partition state (momentum buffer, Adam moments and step
// count), which State()/Restore() read and replace (checkpoints); it is not thread-safe: the
// caller (the partition's owner) serialises every call. The hyper-parameters may change between
// updates, as torch.optim's param_groups may (LR schedules, momentum cycling): SetLr,
// SetHyperparameters. SGD with and without momentum are one optimizer, as in torch: kSgd and
// kMomentum differ only in the momentum they are declared with, and the momentum buffer is made
// by the first update with momentum, and kept (unchanged) through updates without.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::ps {

// kAssign is no optimizer but a shared value, such as a BatchNorm running statistic: the update
// replaces the value by the "gradient" (in sync mode the mean of the workers' values).
enum class OptimizerKind { kSgd, kMomentum, kAdam, kSum, kAssign };

// Parses "sgd", "momentum", "adam", "sum", "assign".
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
  // What Validate checks of one update's values, whatever the kind (every field, so that a value
  // a later update would use is refused when it arrives): torch checks nesterov's conditions only
  // when the optimizer is made, so they are not checked here.
  Status ValidateUpdate() const;
  bool operator==(const OptimizerConfig&) const = default;
};

// The state of one partition's optimizer, as in torch.optim's state_dict: `steps` updates applied
// (Adam's t), `buf` the momentum buffer or Adam's first moment, `sq` Adam's second moment. Empty
// vectors mean "none" (plain SGD; momentum or Adam before their first update).
struct OptimizerState {
  int64_t steps = 0;
  std::vector<float> buf;
  std::vector<float> sq;
};

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, int64_t count);

  // Updates `param` in place with `grad` (same length as the count given at construction).
  // kSum adds the gradient to the value (lr and the rest are ignored): a plain accumulator.
  void Apply(std::span<float> param, std::span<const float> grad);

  // The learning rate of the updates from now on (validated by the caller: finite, >= 0).
  void SetLr(float lr) { config_.lr = lr; }
  float lr() const { return config_.lr; }
  // Every hyper-parameter of `h` but the kind, from now on (validated: ValidateUpdate).
  void SetHyperparameters(const OptimizerConfig& h);
  const OptimizerConfig& config() const { return config_; }

  int64_t steps() const { return steps_; }
  OptimizerState State() const;
  // Checks `state` against this optimizer's kind and size (kInvalidArgument naming the field)
  // and, only when it fits, replaces the current state with it.
  Status Restore(OptimizerState state);

 private:
  bool IsSgd() const {
    return config_.kind == OptimizerKind::kSgd || config_.kind == OptimizerKind::kMomentum;
  }
  // Whether the state buffers exist yet: torch creates Adam's on the first update, SGD's on the
  // first update with momentum.
  bool Started() const { return IsSgd() ? has_buf_ : steps_ > 0; }
  OptimizerConfig config_;
  bool has_buf_ = false;  // SGD: the momentum buffer holds a value
  int64_t count_ = 0;
  int64_t steps_ = 0;
  std::vector<float> buf_;  // momentum buffer, or Adam's first moment
  std::vector<float> sq_;   // Adam's second moment
};

}  // namespace cadre::ps
