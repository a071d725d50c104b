#include "cadre/ps/server_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

namespace cadre::ps {
namespace {

constexpr const char* kFloat32 = "float32";

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

std::string Describe(const PartitionRef& id) {
  return "variable '" + id.variable + "' partition " + std::to_string(id.index);
}

// The index of an entry that also appears earlier, or parts.size() when all differ. Sorts a copy:
// a request may name millions of partitions, so no pairwise comparison.
template <typename T>
size_t FirstRepeat(const std::vector<T*>& parts) {
  std::vector<std::pair<T*, size_t>> sorted;
  sorted.reserve(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) sorted.emplace_back(parts[i], i);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].first == sorted[i - 1].first) return sorted[i].second;
  return parts.size();
}

std::string Seconds(Duration d) {
  std::ostringstream s;
  s << static_cast<double>(d.count()) / 1000.0 << " s";
  return s.str();
}

// The hyper-parameters of a push's update: the declared ones, replaced by those it carries.
OptimizerConfig UpdateConfig(const OptimizerConfig& declared, const ChunkArgs& chunk) {
  OptimizerConfig u = chunk.hyper ? *chunk.hyper : declared;
  u.kind = declared.kind;
  if (chunk.lr) u.lr = *chunk.lr;
  return u;
}

// "momentum 0.5 but an earlier push of that step had 0.9": the first field where `a` (this
// push's) and `b` (the step's) differ.
std::string FirstDifference(const OptimizerConfig& a, const OptimizerConfig& b) {
  const std::pair<const char*, std::pair<float, float>> fields[] = {
      {"learning rate", {a.lr, b.lr}},
      {"momentum", {a.momentum, b.momentum}},
      {"dampening", {a.dampening, b.dampening}},
      {"nesterov", {a.nesterov ? 1.0f : 0.0f, b.nesterov ? 1.0f : 0.0f}},
      {"beta1", {a.beta1, b.beta1}},
      {"beta2", {a.beta2, b.beta2}},
      {"eps", {a.eps, b.eps}},
      {"weight_decay", {a.weight_decay, b.weight_decay}}};
  for (const auto& [name, v] : fields)
    if (v.first != v.second)
      return std::string(name) + " " + std::to_string(v.first) +
             " but an earlier push of that step had " + std::to_string(v.second);
  return "other hyper-parameters than an earlier push of that step";
}

}  // namespace

struct ServerState::Part {
  PartitionRef id;
  std::vector<int64_t> shape;
  OptimizerConfig config;
  bool sync = true;
  std::vector<float> value;
  Optimizer optimizer;
  int64_t step = 0;                // updates applied (sync: the step the partition reached)
  std::vector<float> pending;      // sync: sum of this step's gradients so far
  OptimizerConfig pending_config;  // sync: this step's hyper-parameters (from its first push)
  std::vector<bool> arrived;       // sync: which workers pushed this step
  int arrived_count = 0;

  Part(const DeclareArgs& a, int num_workers)
      : id(a.id),
        shape(a.shape),
        config(a.optimizer),
        sync(a.sync),
        value(static_cast<size_t>(a.id.count)),
        optimizer(a.optimizer, a.id.count),
        arrived(static_cast<size_t>(num_workers), false) {
    std::memcpy(value.data(), a.initial.data(), a.initial.size());
  }
};

ServerState::ServerState(int num_workers, Duration step_timeout, Duration worker_timeout,
                         size_t max_reply_bytes)
    : num_workers_(num_workers),
      step_timeout_(step_timeout),
      worker_timeout_(worker_timeout),
      max_reply_bytes_(max_reply_bytes),
      done_(static_cast<size_t>(std::max(num_workers, 0)), false),
      live_workers_(std::max(num_workers, 0)),
      calls_in_progress_(static_cast<size_t>(std::max(num_workers, 0)), 0),
      last_seen_(static_cast<size_t>(std::max(num_workers, 0)), Clock::now()),
      staged_(static_cast<size_t>(std::max(num_workers, 0))) {}

// Constructed after CheckWorker succeeded and before the call takes mu_ (so that it is destroyed
// after the call released it).
class ServerState::Activity {
 public:
  Activity(ServerState& s, int worker) : s_(s), w_(static_cast<size_t>(worker)) {
    std::lock_guard lock(s_.mu_);
    s_.calls_in_progress_[w_] += 1;
    s_.last_seen_[w_] = Clock::now();
  }
  ~Activity() {
    std::lock_guard lock(s_.mu_);
    s_.calls_in_progress_[w_] -= 1;
    s_.last_seen_[w_] = Clock::now();
    // No notify: activity only moves a worker's liveness deadline later, and WaitAllDone, waking
    // at the earlier one, recomputes it.
  }
  Activity(const Activity&) = delete;
  Activity& operator=(const Activity&) = delete;

 private:
  ServerState& s_;
  size_t w_;
};

ServerState::~ServerState() = default;

std::string ServerState::Key(const std::string& variable, int32_t index) {
  return variable + '\0' + std::to_string(index);
}

Status ServerState::CheckWorker(int worker) const {
  if (worker < 0 || worker >= num_workers_)
    return InvalidArgument("worker id " + std::to_string(worker) + " is outside the job (0.." +
                           std::to_string(num_workers_ - 1) + ")");
  return Status::Ok();
}

Status ServerState::Lookup(const PartitionRef& id, const std::string& dtype, size_t bytes,
                           Part** out) const {
  auto it = parts_.find(Key(id.variable, id.index));
  if (it == parts_.end()) return NotFound("unknown " + Describe(id) + " (not declared)");
  Part& p = *it->second;
  if (dtype != kFloat32)
    return InvalidArgument(Describe(id) + ": dtype '" + dtype + "' does not match the declared " +
                           kFloat32);
  if (id.offset != p.id.offset || id.count != p.id.count)
    return InvalidArgument(Describe(id) + ": elements [" + std::to_string(id.offset) + ", +" +
                           std::to_string(id.count) + ") do not match the declared [" +
                           std::to_string(p.id.offset) + ", +" + std::to_string(p.id.count) + ")");
  if (bytes != static_cast<size_t>(p.id.count) * sizeof(float))
    return InvalidArgument(Describe(id) + ": payload has " + std::to_string(bytes) +
                           " bytes, expected " + std::to_string(p.id.count * sizeof(float)));
  *out = &p;
  return Status::Ok();
}

Status ServerState::Declare(int worker, const std::vector<DeclareArgs>& parts,
                            std::vector<bool>* created) {
  CADRE_RETURN_IF_ERROR(CheckWorker(worker));
  Activity activity(*this, worker);
  std::lock_guard lock(mu_);
  created->assign(parts.size(), false);
  std::set<std::string> fresh;  // keys created by earlier entries of this same request
  for (size_t i = 0; i < parts.size(); ++i) {
    const DeclareArgs& a = parts[i];
    const std::string where = Describe(a.id);
    if (a.id.variable.empty()) return InvalidArgument("declare: a variable has an empty name");
    if (a.dtype != kFloat32)
      return InvalidArgument(where + ": dtype '" + a.dtype + "' is not served (only float32)");
    int64_t total = 1;
    for (int64_t d : a.shape) {
      if (d < 0 || (d > 0 && total > (int64_t{1} << 40) / d))
        return InvalidArgument(where + ": shape " + ShapeString(a.shape) + " is invalid");
      total *= d;
    }
    // Written so that no sum can overflow: offset and count are the peer's, up to INT64_MAX.
    if (a.id.index < 0 || a.id.offset < 0 || a.id.count < 0 || a.id.offset > total ||
        a.id.count > total - a.id.offset)
      return InvalidArgument(where + ": elements [" + std::to_string(a.id.offset) + ", +" +
                             std::to_string(a.id.count) + ") are outside shape " +
                             ShapeString(a.shape));
    if (a.initial.size() != static_cast<size_t>(a.id.count) * sizeof(float))
      return InvalidArgument(where + ": initial value has " + std::to_string(a.initial.size()) +
                             " bytes, expected " + std::to_string(a.id.count * sizeof(float)));
    Status valid = a.optimizer.Validate();
    if (!valid.ok()) return valid.WithContext(where);
    std::string key = Key(a.id.variable, a.id.index);
    auto it = parts_.find(key);
    bool repeated = fresh.count(key) != 0;
    if (it == parts_.end() && !repeated) {
      fresh.insert(key);
      (*created)[i] = true;
      continue;
    }
    if (repeated) return InvalidArgument(where + " appears twice in one declare request");
    const Part& p = *it->second;
    if (p.shape != a.shape || p.id.offset != a.id.offset || p.id.count != a.id.count)
      return InvalidArgument(where + ": already declared with shape " + ShapeString(p.shape) +
                             " elements [" + std::to_string(p.id.offset) + ", +" +
                             std::to_string(p.id.count) + "), not shape " + ShapeString(a.shape) +
                             " elements [" + std::to_string(a.id.offset) + ", +" +
                             std::to_string(a.id.count) + ")");
    if (p.sync != a.sync)
      return InvalidArgument(where + ": already declared " + (p.sync ? "sync" : "async") +
                             ", not " + (a.sync ? "sync" : "async"));
    if (!(p.config == a.optimizer))
      return InvalidArgument(where + ": already declared with optimizer " +
                             OptimizerKindName(p.config.kind) + " and different hyper-parameters");
  }
  // Everything checked: now create.
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!(*created)[i]) continue;
    parts_[Key(parts[i].id.variable, parts[i].id.index)] =
        std::make_unique<Part>(parts[i], num_workers_);
  }
  return Status::Ok();
}

std::string ServerState::MissingWorkers(const Part& part) const {
  std::string out;
  for (int w = 0; w < num_workers_; ++w) {
    if (part.arrived[static_cast<size_t>(w)] || done_[static_cast<size_t>(w)]) continue;
    out += (out.empty() ? "" : ", ") + std::to_string(w);
  }
  return out.empty() ? "none" : out;
}

void ServerState::MaybeApply(Part& part) {
  if (!part.sync || part.arrived_count == 0) return;
  // Every worker still running must have pushed; a worker that said done is not waited for (its
  // push of this step, if it made one, still counts).
  for (int w = 0; w < num_workers_; ++w)
    if (!part.arrived[static_cast<size_t>(w)] && !done_[static_cast<size_t>(w)]) return;
  if (part.config.kind != OptimizerKind::kSum) {
    const float scale = 1.0f / static_cast<float>(part.arrived_count);
    for (float& g : part.pending) g *= scale;
  }
  part.optimizer.SetHyperparameters(part.pending_config);
  part.optimizer.Apply(part.value, part.pending);
  part.step += 1;
  std::fill(part.pending.begin(), part.pending.end(), 0.0f);
  std::fill(part.arrived.begin(), part.arrived.end(), false);
  part.arrived_count = 0;
  cv_.notify_all();
}

Status ServerState::Push(int worker, int64_t step, const std::vector<ChunkArgs>& grads) {
  CADRE_RETURN_IF_ERROR(CheckWorker(worker));
  Activity activity(*this, worker);
  if (step < 0) return InvalidArgument("push: step " + std::to_string(step) + " is negative");
  std::unique_lock lock(mu_);
  if (done_[static_cast<size_t>(worker)])
    return MismatchError("push: worker " + std::to_string(worker) + " already said done");
  std::vector<Part*> targets(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    CADRE_RETURN_IF_ERROR(Lookup(grads[i].id, grads[i].dtype, grads[i].data.size(), &targets[i]));
  }
  if (size_t i = FirstRepeat(targets); i < targets.size())
    return InvalidArgument("push: " + Describe(grads[i].id) + " appears twice in one request");
  // A worker may run ahead by pushing without pulling: wait until each sync partition is at
  // `step`. Nothing has changed yet, so giving up here leaves the state untouched.
  const Deadline deadline(step_timeout_);
  for (size_t i = 0; i < targets.size(); ++i) {
    Part* p = targets[i];
    if (!p->sync) continue;
    bool ok = cv_.wait_until(lock, deadline.at(), [&] { return aborted_ || p->step >= step; });
    if (aborted_) return AbortedError("push: the server is shutting down");
    if (!ok)
      return TimeoutError("push of step " + std::to_string(step) + " for " + Describe(p->id) +
                          ": the partition stayed at step " + std::to_string(p->step) + " for " +
                          Seconds(step_timeout_) + "; workers missing: " + MissingWorkers(*p));
  }
  std::vector<OptimizerConfig> updates(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    Part* p = targets[i];
    OptimizerConfig& u = updates[i];
    u = UpdateConfig(p->config, grads[i]);
    if (!std::isfinite(u.lr) || u.lr < 0)
      return InvalidArgument("push: " + Describe(p->id) + ": learning rate " +
                             std::to_string(u.lr) + " is not a finite value >= 0");
    CADRE_RETURN_IF_ERROR(u.ValidateUpdate().WithContext("push: " + Describe(p->id)));
    if (!p->sync) continue;
    if (p->arrived_count > 0 && !(u == p->pending_config))
      return MismatchError("push: worker " + std::to_string(worker) + " pushed step " +
                           std::to_string(step) + " of " + Describe(p->id) + " with " +
                           FirstDifference(u, p->pending_config) +
                           ": every worker must follow the same hyper-parameter schedule");
    if (p->step > step)
      return MismatchError("push: step " + std::to_string(step) + " of " + Describe(p->id) +
                           " was already applied (the partition is at step " +
                           std::to_string(p->step) + ")");
    if (p->arrived[static_cast<size_t>(worker)])
      return Status(Code::kAlreadyExists, "push: worker " + std::to_string(worker) +
                                              " already pushed step " + std::to_string(step) +
                                              " of " + Describe(p->id));
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    Part& p = *targets[i];
    const float* g = reinterpret_cast<const float*>(grads[i].data.data());
    std::span<const float> grad(g, static_cast<size_t>(p.id.count));
    if (!p.sync) {
      p.optimizer.SetHyperparameters(updates[i]);
      p.optimizer.Apply(p.value, grad);
      p.step += 1;
      continue;
    }
    if (p.arrived_count == 0) p.pending_config = updates[i];
    if (p.pending.empty()) p.pending.assign(p.value.size(), 0.0f);
    for (size_t k = 0; k < grad.size(); ++k) p.pending[k] += grad[k];
    p.arrived[static_cast<size_t>(worker)] = true;
    p.arrived_count += 1;
    MaybeApply(p);
  }
  return Status::Ok();
}

Status ServerState::Collect(const char* what, int64_t step, const std::vector<PartitionRef>& ids,
                            size_t bytes_per_value, std::unique_lock<std::mutex>& lock,
                            std::vector<Part*>* out) {
  const std::string op(what);
  if (step < 0) return InvalidArgument(op + ": step " + std::to_string(step) + " is negative");
  std::vector<Part*>& targets = *out;
  targets.assign(ids.size(), nullptr);
  size_t reply_bytes = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = parts_.find(Key(ids[i].variable, ids[i].index));
    if (it == parts_.end()) return NotFound(op + ": unknown " + Describe(ids[i]));
    targets[i] = it->second.get();
    reply_bytes += targets[i]->value.size() * bytes_per_value;
    if (reply_bytes > max_reply_bytes_)
      return InvalidArgument(op + ": the " + std::to_string(ids.size()) +
                             " partitions asked for hold more than the " +
                             std::to_string(max_reply_bytes_) +
                             " bytes one reply may carry; ask for fewer per request");
  }
  if (size_t i = FirstRepeat(targets); i < targets.size())
    return InvalidArgument(op + ": " + Describe(ids[i]) + " appears twice in one request");
  const Deadline deadline(step_timeout_);
  for (Part* p : targets) {
    if (!p->sync) continue;
    bool ok = cv_.wait_until(lock, deadline.at(), [&] { return aborted_ || p->step >= step; });
    if (aborted_) return AbortedError(op + ": the server is shutting down");
    if (!ok)
      return TimeoutError(op + " of step " + std::to_string(step) + " for " + Describe(p->id) +
                          ": no update within " + Seconds(step_timeout_) +
                          " (the partition is at step " + std::to_string(p->step) +
                          "); workers missing: " + MissingWorkers(*p));
  }
  return Status::Ok();
}

Status ServerState::Pull(
    int worker, int64_t step, const std::vector<PartitionRef>& ids,
    const std::function<void(const PartitionRef&, std::span<const float>)>& emit) {
  CADRE_RETURN_IF_ERROR(CheckWorker(worker));
  Activity activity(*this, worker);
  std::unique_lock lock(mu_);
  std::vector<Part*> targets;
  CADRE_RETURN_IF_ERROR(Collect("pull", step, ids, sizeof(float), lock, &targets));
  for (Part* p : targets) emit(p->id, p->value);
  return Status::Ok();
}

Status ServerState::GetState(
    int worker, int64_t step, const std::vector<PartitionRef>& ids,
    const std::function<void(const PartitionRef&, const Optimizer&)>& emit) {
  CADRE_RETURN_IF_ERROR(CheckWorker(worker));
  Activity activity(*this, worker);
  std::unique_lock lock(mu_);
  std::vector<Part*> targets;
  // Adam keeps two values per element.
  CADRE_RETURN_IF_ERROR(Collect("get state", step, ids, 2 * sizeof(float), lock, &targets));
  for (Part* p : targets) emit(p->id, p->optimizer);
  return Status::Ok();
}

Status ServerState::CheckStates(std::vector<StateArgs> states, std::vector<Part*>* targets,
                                std::vector<Optimizer>* restored) const {
  targets->assign(states.size(), nullptr);
  for (size_t i = 0; i < states.size(); ++i) {
    const PartitionRef& id = states[i].id;
    CADRE_RETURN_IF_ERROR(
        Lookup(id, kFloat32, static_cast<size_t>(std::max<int64_t>(id.count, 0)) * sizeof(float),
               &(*targets)[i])
            .WithContext("set state"));
  }
  if (size_t i = FirstRepeat(*targets); i < targets->size())
    return InvalidArgument("set state: " + Describe(states[i].id) +
                           " appears twice in one request");
  // Restore on copies, so that a refused entry leaves every optimizer as it was.
  restored->clear();
  restored->reserve(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    restored->push_back((*targets)[i]->optimizer);
    CADRE_RETURN_IF_ERROR(restored->back()
                              .Restore(std::move(states[i].state))
                              .WithContext("set state of " + Describe(states[i].id)));
  }
  return Status::Ok();
}

Status ServerState::SetState(int worker, std::vector<StateArgs> states) {
  CADRE_RETURN_IF_ERROR(CheckWorker(worker));
  Activity activity(*this, worker);
  std::lock_guard lock(mu_);
  std::vector<Part*> targets;
  std::vector<Optimizer> restored;
  CADRE_RETURN_IF_ERROR(CheckStates(std::move(states), &targets, &restored));
  for (size_t i = 0; i < targets.size(); ++i) targets[i]->optimizer = std::move(restored[i]);
  return Status::Ok();
}

Status ServerState::StageState(int worker, std::vector<StateArgs> states) {
  CADRE_RETURN_IF_ERROR(CheckWorker(worker));
  Activity activity(*this, worker);
  std::lock_guard lock(mu_);
  std::vector<std::string> keys;
  for (const StateArgs& st : states) keys.push_back(Key(st.id.variable, st.id.index));
  std::vector<Part*> targets;
  std::vector<Optimizer> restored;
  CADRE_RETURN_IF_ERROR(CheckStates(std::move(states), &targets, &restored));
  auto& staged = staged_[static_cast<size_t>(worker)];
  for (size_t i = 0; i < targets.size(); ++i)
    staged.insert_or_assign(keys[i], std::pair{targets[i], std::move(restored[i])});
  return Status::Ok();
}

Status ServerState::CommitState(int worker, bool commit) {
  CADRE_RETURN_IF_ERROR(CheckWorker(worker));
  Activity activity(*this, worker);
  std::lock_guard lock(mu_);
  auto& staged = staged_[static_cast<size_t>(worker)];
  // The staged copies were checked against these partitions, whose kind and size never change;
  // only their state is taken, the optimizers' hyper-parameters stay the current ones.
  std::map<std::string, std::pair<Part*, Optimizer>> taken;
  taken.swap(staged);
  if (!commit) return Status::Ok();
  for (auto& [key, entry] : taken) {
    Status restored = entry.first->optimizer.Restore(entry.second.State());
    if (!restored.ok())
      return InternalError("commit state: " + key +
                           " no longer fits what was staged: " + restored.message());
  }
  return Status::Ok();
}

Status ServerState::WorkerDone(int worker, int* remaining) {
  CADRE_RETURN_IF_ERROR(CheckWorker(worker));
  std::lock_guard lock(mu_);
  if (!done_[static_cast<size_t>(worker)]) {
    done_[static_cast<size_t>(worker)] = true;
    live_workers_ -= 1;
    // A step that only waited for this worker can now complete. Its own contribution, if it
    // pushed this step, stays in the sum.
    for (auto& [key, part] : parts_) MaybeApply(*part);
    cv_.notify_all();
  }
  *remaining = live_workers_;
  return Status::Ok();
}

std::vector<int> ServerState::SilentWorkers(Clock::time_point silent_since) const {
  std::vector<int> out;
  for (int w = 0; w < num_workers_; ++w) {
    auto i = static_cast<size_t>(w);
    if (!done_[i] && calls_in_progress_[i] == 0 && last_seen_[i] <= silent_since) out.push_back(w);
  }
  return out;
}

Status ServerState::WaitAllDone(const Deadline& deadline) {
  std::unique_lock lock(mu_);
  while (!aborted_ && live_workers_ > 0) {
    const auto now = Clock::now();
    std::vector<int> silent = SilentWorkers(now - worker_timeout_);
    if (!silent.empty()) {
      std::string list;
      for (int w : silent) list += (list.empty() ? "" : ", ") + std::to_string(w);
      return IoError("worker" + std::string(silent.size() > 1 ? "s " : " ") + list +
                     " sent no request for " + Seconds(worker_timeout_) +
                     " and did not say done (exited or stuck?); " + std::to_string(live_workers_) +
                     " of " + std::to_string(num_workers_) + " workers not done");
    }
    if (now >= deadline.at()) return TimeoutError("workers still running at the deadline");
    // Wake at the deadline or when the longest-silent idle worker would time out (recomputed
    // then: it may have been active since).
    auto wake = deadline.at();
    for (int w = 0; w < num_workers_; ++w) {
      auto i = static_cast<size_t>(w);
      if (!done_[i] && calls_in_progress_[i] == 0)
        wake = std::min(wake, last_seen_[i] + worker_timeout_);
    }
    cv_.wait_until(lock, wake);
  }
  if (aborted_ && live_workers_ > 0) return AbortedError("the server was shut down");
  return Status::Ok();
}

void ServerState::Abort() {
  std::lock_guard lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

int64_t ServerState::PartitionStep(const std::string& variable, int32_t index) const {
  std::lock_guard lock(mu_);
  auto it = parts_.find(Key(variable, index));
  return it == parts_.end() ? -1 : it->second->step;
}

}  // namespace cadre::ps
