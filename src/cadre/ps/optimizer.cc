#include "cadre/ps/optimizer.h"

#include <cmath>

namespace cadre::ps {

Status ParseOptimizerKind(const std::string& name, OptimizerKind* kind) {
  if (name == "sgd") {
    *kind = OptimizerKind::kSgd;
  } else if (name == "momentum") {
    *kind = OptimizerKind::kMomentum;
  } else if (name == "adam") {
    *kind = OptimizerKind::kAdam;
  } else if (name == "sum") {
    *kind = OptimizerKind::kSum;
  } else {
    return InvalidArgument("optimizer.kind: '" + name + "' is not one of sgd, momentum, adam, sum");
  }
  return Status::Ok();
}

std::string OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kMomentum:
      return "momentum";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kSum:
      return "sum";
  }
  return "unknown";
}

Status OptimizerConfig::Validate() const {
  auto bad = [](const char* field, float v, const char* want) {
    return InvalidArgument(std::string("optimizer.") + field + ": " + std::to_string(v) +
                           " is not " + want);
  };
  if (!std::isfinite(lr) || lr < 0) return bad("lr", lr, "a finite value >= 0");
  if (!std::isfinite(weight_decay) || weight_decay < 0)
    return bad("weight_decay", weight_decay, "a finite value >= 0");
  if (kind == OptimizerKind::kMomentum) {
    if (!std::isfinite(momentum) || momentum < 0) return bad("momentum", momentum, ">= 0");
    if (!std::isfinite(dampening)) return bad("dampening", dampening, "finite");
    if (nesterov && (momentum <= 0 || dampening != 0))
      return InvalidArgument("optimizer.nesterov needs momentum > 0 and dampening = 0");
  }
  if (kind == OptimizerKind::kAdam) {
    if (!(beta1 >= 0 && beta1 < 1)) return bad("beta1", beta1, "in [0, 1)");
    if (!(beta2 >= 0 && beta2 < 1)) return bad("beta2", beta2, "in [0, 1)");
    if (!std::isfinite(eps) || eps < 0) return bad("eps", eps, "a finite value >= 0");
  }
  return Status::Ok();
}

Optimizer::Optimizer(const OptimizerConfig& config, int64_t count) : config_(config) {
  if (config.kind == OptimizerKind::kMomentum || config.kind == OptimizerKind::kAdam)
    buf_.assign(static_cast<size_t>(count), 0.0f);
  if (config.kind == OptimizerKind::kAdam) sq_.assign(static_cast<size_t>(count), 0.0f);
}

void Optimizer::Apply(std::span<float> param, std::span<const float> grad) {
  const size_t n = param.size();
  const OptimizerConfig& c = config_;
  ++steps_;
  switch (c.kind) {
    case OptimizerKind::kSum:
      for (size_t i = 0; i < n; ++i) param[i] += grad[i];
      return;
    case OptimizerKind::kSgd:
      for (size_t i = 0; i < n; ++i) param[i] -= c.lr * (grad[i] + c.weight_decay * param[i]);
      return;
    case OptimizerKind::kMomentum:
      for (size_t i = 0; i < n; ++i) {
        float g = grad[i] + c.weight_decay * param[i];
        // torch initialises the buffer with the first gradient, without dampening.
        buf_[i] = steps_ == 1 ? g : c.momentum * buf_[i] + (1 - c.dampening) * g;
        float d = c.nesterov ? g + c.momentum * buf_[i] : buf_[i];
        param[i] -= c.lr * d;
      }
      return;
    case OptimizerKind::kAdam: {
      const double t = static_cast<double>(steps_);
      const float bc1 = static_cast<float>(1 - std::pow(c.beta1, t));
      const float bc2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(c.beta2, t)));
      const float step_size = c.lr / bc1;
      for (size_t i = 0; i < n; ++i) {
        float g = grad[i] + c.weight_decay * param[i];
        buf_[i] = c.beta1 * buf_[i] + (1 - c.beta1) * g;
        sq_[i] = c.beta2 * sq_[i] + (1 - c.beta2) * g * g;
        float denom = std::sqrt(sq_[i]) / bc2_sqrt + c.eps;
        param[i] -= step_size * buf_[i] / denom;
      }
      return;
    }
  }
}

}  // namespace cadre::ps
