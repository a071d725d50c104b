#include "cadre/ps/optimizer.h"

#include <algorithm>
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
  } else if (name == "assign") {
    *kind = OptimizerKind::kAssign;
  } else {
    return InvalidArgument("optimizer.kind: '" + name +
                           "' is not one of sgd, momentum, adam, sum, assign");
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
    case OptimizerKind::kAssign:
      return "assign";
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

Optimizer::Optimizer(const OptimizerConfig& config, int64_t count)
    : config_(config), count_(count) {
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
    case OptimizerKind::kAssign:
      std::copy(grad.begin(), grad.end(), param.begin());
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

OptimizerState Optimizer::State() const {
  OptimizerState s;
  s.steps = steps_;
  if (Started()) {
    s.buf = buf_;
    s.sq = sq_;
  }
  return s;
}

Status Optimizer::Restore(OptimizerState state) {
  const bool momentum = config_.kind == OptimizerKind::kMomentum;
  const bool adam = config_.kind == OptimizerKind::kAdam;
  const std::string kind = OptimizerKindName(config_.kind);
  if (state.steps < 0)
    return InvalidArgument("optimizer state.steps: " + std::to_string(state.steps) +
                           " is negative");
  auto check = [&](const std::vector<float>& v, bool wanted, const char* field) -> Status {
    if (!wanted && !v.empty())
      return InvalidArgument(std::string("optimizer state.") + field + ": optimizer " + kind +
                             " keeps none, but " + std::to_string(v.size()) + " values were given");
    if (wanted && !v.empty() && static_cast<int64_t>(v.size()) != count_)
      return InvalidArgument(std::string("optimizer state.") + field + ": " +
                             std::to_string(v.size()) + " values for a partition of " +
                             std::to_string(count_));
    for (float x : v)
      if (!std::isfinite(x))
        return InvalidArgument(std::string("optimizer state.") + field +
                               ": holds a value that is not finite");
    return Status::Ok();
  };
  CADRE_RETURN_IF_ERROR(check(state.buf, momentum || adam, "buf"));
  CADRE_RETURN_IF_ERROR(check(state.sq, adam, "sq"));
  const bool has_buffers = !state.buf.empty() && (!adam || !state.sq.empty());
  if ((momentum || adam) && has_buffers != (state.steps > 0))
    return InvalidArgument("optimizer state: optimizer " + kind + " after " +
                           std::to_string(state.steps) + " steps must " +
                           (state.steps > 0 ? "have" : "not have") + " its buffers");
  steps_ = state.steps;
  if (momentum || adam) {
    if (state.buf.empty()) state.buf.assign(static_cast<size_t>(count_), 0.0f);
    buf_ = std::move(state.buf);
  }
  if (adam) {
    if (state.sq.empty()) state.sq.assign(static_cast<size_t>(count_), 0.0f);
    sq_ = std::move(state.sq);
  }
  return Status::Ok();
}

}  // namespace cadre::ps
