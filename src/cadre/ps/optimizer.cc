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

namespace {

Status CheckValues(const OptimizerConfig& c, bool every_kind) {
  auto bad = [](const char* field, float v, const char* want) {
    return InvalidArgument(std::string("optimizer.") + field + ": " + std::to_string(v) +
                           " is not " + want);
  };
  if (!std::isfinite(c.lr) || c.lr < 0) return bad("lr", c.lr, "a finite value >= 0");
  if (!std::isfinite(c.weight_decay) || c.weight_decay < 0)
    return bad("weight_decay", c.weight_decay, "a finite value >= 0");
  if (every_kind || c.kind == OptimizerKind::kMomentum) {
    if (!std::isfinite(c.momentum) || c.momentum < 0) return bad("momentum", c.momentum, ">= 0");
    if (!std::isfinite(c.dampening)) return bad("dampening", c.dampening, "finite");
  }
  if (every_kind || c.kind == OptimizerKind::kAdam) {
    if (!(c.beta1 >= 0 && c.beta1 < 1)) return bad("beta1", c.beta1, "in [0, 1)");
    if (!(c.beta2 >= 0 && c.beta2 < 1)) return bad("beta2", c.beta2, "in [0, 1)");
    if (!std::isfinite(c.eps) || c.eps < 0) return bad("eps", c.eps, "a finite value >= 0");
  }
  return Status::Ok();
}

}  // namespace

Status OptimizerConfig::Validate() const {
  CADRE_RETURN_IF_ERROR(CheckValues(*this, false));
  if (kind == OptimizerKind::kMomentum && nesterov && (momentum <= 0 || dampening != 0))
    return InvalidArgument("optimizer.nesterov needs momentum > 0 and dampening = 0");
  return Status::Ok();
}

Status OptimizerConfig::ValidateUpdate() const { return CheckValues(*this, true); }

void Optimizer::SetHyperparameters(const OptimizerConfig& h) {
  const OptimizerKind kind = config_.kind;
  config_ = h;
  config_.kind = kind;
}

Optimizer::Optimizer(const OptimizerConfig& config, int64_t count)
    : config_(config), count_(count) {
  // SGD declared without momentum makes its buffer if momentum comes later.
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
    case OptimizerKind::kMomentum: {
      if (c.momentum == 0) {  // torch leaves the buffer as it is
        for (size_t i = 0; i < n; ++i) param[i] -= c.lr * (grad[i] + c.weight_decay * param[i]);
        return;
      }
      // torch initialises the buffer with the first gradient, without dampening.
      const bool first = !has_buf_;
      if (first) buf_.resize(static_cast<size_t>(count_));
      has_buf_ = true;
      for (size_t i = 0; i < n; ++i) {
        float g = grad[i] + c.weight_decay * param[i];
        buf_[i] = first ? g : c.momentum * buf_[i] + (1 - c.dampening) * g;
        float d = c.nesterov ? g + c.momentum * buf_[i] : buf_[i];
        param[i] -= c.lr * d;
      }
      return;
    }
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
  const bool momentum = IsSgd();  // a momentum buffer, whether momentum is on now or not
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
  // Adam's moments exist from its first step on; SGD's buffer only if momentum was on.
  const bool has_buffers = !state.buf.empty() && !state.sq.empty();
  if (adam && has_buffers != (state.steps > 0))
    return InvalidArgument("optimizer state: optimizer " + kind + " after " +
                           std::to_string(state.steps) + " steps must " +
                           (state.steps > 0 ? "have" : "not have") + " its buffers");
  steps_ = state.steps;
  if (momentum) {
    has_buf_ = !state.buf.empty();
    buf_ = std::move(state.buf);
  }
  if (adam) {
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
