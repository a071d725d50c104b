#include "cadre/config/from_env.h"

#include <cmath>
#include <stdexcept>

#include "cadre/base/env.h"
#include "cadre/comm/collectives.h"
#include "cadre/comm/hierarchical.h"
#include "cadre/net/socket.h"
#include "cadre/store/prefix_store.h"
#include "cadre/store/tcp_store.h"

namespace cadre::config {

namespace {

// "CADRE_ wins": the Horovod name is read (and checked) only when the cadre one is unset.
const char* EitherName(const char* cadre_name, const char* horovod_name) {
  return GetEnv(cadre_name) ? cadre_name : horovod_name;
}

Duration EnvSecondsEither(const char* cadre_name, const char* horovod_name, Duration fallback) {
  return EnvSeconds(EitherName(cadre_name, horovod_name), fallback);
}

// An integer variable (the cadre name, else the Horovod one when given) within [low, high];
// otherwise kInvalidArgument naming the variable that was read and the range.
int64_t EnvIntIn(const char* cadre_name, const char* horovod_name, int64_t fallback, int64_t low,
                 int64_t high) {
  const char* name = horovod_name ? EitherName(cadre_name, horovod_name) : cadre_name;
  const std::string range = std::to_string(low) + " to " + std::to_string(high);
  int64_t v = fallback;
  try {
    v = EnvInt(name, fallback);
  } catch (const Error& e) {
    throw Error(InvalidArgument(e.status().message() + " (" + range + ")"));
  }
  if (v < low || v > high) {
    throw Error(
        InvalidArgument(std::string(name) + "=" + std::to_string(v) + " is outside " + range));
  }
  return v;
}

}  // namespace

std::string HostsFileFromEnv() { return GetEnv("CADRE_HOSTS").value_or(""); }

engine::EngineOptions EngineOptionsFromEnv() {
  engine::EngineOptions o;
  // Horovod's HOROVOD_CYCLE_TIME is in milliseconds and may be fractional.
  auto cycle = GetEnv("CADRE_CYCLE_TIME");
  if (!cycle) cycle = GetEnv("HOROVOD_CYCLE_TIME");
  if (cycle) {
    try {
      size_t used = 0;
      double ms = std::stod(*cycle, &used);
      if (used != cycle->size() || ms < 0) throw std::invalid_argument("bad");
      if (ms > 1e6) throw std::invalid_argument("too long");
      o.cycle_time = std::chrono::microseconds(std::llround(ms * 1000));
    } catch (const std::exception&) {
      throw Error(InvalidArgument("HOROVOD_CYCLE_TIME/CADRE_CYCLE_TIME=" + *cycle +
                                  " is not a number of milliseconds (0 to 1000000)"));
    }
  }
  constexpr int64_t kMaxBytes = int64_t{1} << 40;
  o.fusion_threshold_bytes =
      static_cast<size_t>(EnvIntIn("CADRE_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD",
                                   static_cast<int64_t>(o.fusion_threshold_bytes), 0, kMaxBytes));
  o.fusion_tensor_limit_bytes = static_cast<size_t>(
      EnvIntIn("CADRE_FUSION_TENSOR_LIMIT", nullptr,
               static_cast<int64_t>(o.fusion_tensor_limit_bytes), 0, kMaxBytes));
  o.cache_capacity =
      static_cast<size_t>(EnvIntIn("CADRE_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY",
                                   static_cast<int64_t>(o.cache_capacity), 0, int64_t{1} << 31));
  o.inline_bytes = static_cast<size_t>(
      EnvIntIn("CADRE_INLINE_BYTES", nullptr, static_cast<int64_t>(o.inline_bytes), 0, 4096));
  o.inline_message_bytes = std::max(o.inline_message_bytes, o.inline_bytes);
  // CADRE_BATCH_WAIT_MS: unset, empty or `auto` measures the window (rank 0's tuner); a number
  // of milliseconds (fractional, as HOROVOD_CYCLE_TIME) fixes it, 0 disabling the wait.
  if (auto wait = GetEnv("CADRE_BATCH_WAIT_MS"); wait && !wait->empty() && *wait != "auto") {
    try {
      size_t used = 0;
      const double ms = std::stod(*wait, &used);
      if (used != wait->size() || !(ms >= 0 && ms <= 1000)) throw std::invalid_argument("bad");
      o.batch_wait = std::chrono::microseconds(std::llround(ms * 1000));
    } catch (const std::exception&) {
      throw Error(InvalidArgument("CADRE_BATCH_WAIT_MS=" + *wait +
                                  " is neither `auto` nor a number of milliseconds (0 to 1000)"));
    }
  }
  if (auto log = GetEnv("CADRE_AUTOTUNE_LOG"); log && !log->empty()) {
    o.batch_window_log = *log;
  } else if (auto h = GetEnv("HOROVOD_AUTOTUNE_LOG")) {
    o.batch_window_log = *h;
  }
  o.spin =
      std::chrono::microseconds(EnvIntIn("CADRE_SPIN_US", nullptr, o.spin.count(), 0, 1'000'000));
  o.stall_warning = EnvSecondsEither("CADRE_STALL_CHECK_TIME_SECONDS",
                                     "HOROVOD_STALL_CHECK_TIME_SECONDS", o.stall_warning);
  o.stall_shutdown = EnvSecondsEither("CADRE_STALL_SHUTDOWN_TIME_SECONDS",
                                      "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", o.stall_shutdown);
  o.stall_deadlock = EnvSeconds("CADRE_STALL_DEADLOCK_TIME_SECONDS", o.stall_deadlock);
  if (auto t = GetEnv("CADRE_TIMELINE")) {
    o.timeline_path = *t;
  } else if (auto h = GetEnv("HOROVOD_TIMELINE")) {
    o.timeline_path = *h;
  }
  o.timeline_mark_cycles =
      EnvBool(EitherName("CADRE_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES"), false);
  // CADRE_ALLREDUCE_ALGORITHM, else Horovod's --hierarchical-allreduce: 1 hierarchical, 0 the
  // flat ring.
  if (auto v = GetEnv("CADRE_ALLREDUCE_ALGORITHM"); v && !v->empty()) {
    Status s = comm::ParseAllreduceAlgorithm(*v, &o.allreduce_algorithm);
    if (!s.ok()) throw Error(Status(s.code(), "CADRE_ALLREDUCE_ALGORITHM=" + s.message()));
  } else if (auto h = GetEnv("HOROVOD_HIERARCHICAL_ALLREDUCE"); h && !h->empty()) {
    o.allreduce_algorithm = EnvBool("HOROVOD_HIERARCHICAL_ALLREDUCE", false)
                                ? comm::AllreduceAlgorithm::kHierarchical
                                : comm::AllreduceAlgorithm::kRing;
  }
  return o;
}

void ReadCommunicatorTunables(comm::CommunicatorOptions* options) {
  options->shm_slot_bytes = static_cast<size_t>(
      EnvIntIn("CADRE_SHM_SLOT_BYTES", nullptr, static_cast<int64_t>(options->shm_slot_bytes), 0,
               static_cast<int64_t>(comm::kMaxShmSlotBytes)));
  options->shm_spin_max = std::chrono::microseconds(
      EnvIntIn("CADRE_SHM_SPIN_US", nullptr, options->shm_spin_max.count(), 0, 1'000'000));
  options->hosts_file = HostsFileFromEnv();
}

std::shared_ptr<store::Store> ConnectStoreFromEnv(std::string identity, Duration timeout) {
  auto address = GetEnv("CADRE_STORE");
  if (!address) {
    throw Error(InvalidArgument(
        "CADRE_STORE is not set: it must hold host:port of the job's store (set by cadre run)"));
  }
  auto token = GetEnv("CADRE_JOB_TOKEN");
  if (!token || token->empty()) {
    throw Error(InvalidArgument(std::string("CADRE_JOB_TOKEN is ") + (token ? "empty" : "not set") +
                                ": it must hold the job's secret token (set by cadre run)"));
  }
  net::HostPort hp;
  ThrowIfError(net::ParseHostPort(*address, "CADRE_STORE", &hp));
  store::TcpStoreOptions options;
  options.host = hp.host;
  options.port = hp.port;
  options.token = *token;
  options.identity = std::move(identity);
  options.connect_timeout = timeout;
  options.timeout = timeout;
  options.hosts_file = HostsFileFromEnv();
  return std::make_shared<store::TcpStore>(std::move(options));
}

engine::EngineGroupOptions EngineGroupOptionsFromEnv(const std::string& backend, int rank, int size,
                                                     Duration timeout, const std::string& prefix) {
  engine::EngineGroupOptions g;
  ThrowIfError(engine::ParseEngineBackend(backend, &g.backend).WithContext("CADRE_ENGINE_BACKEND"));
  comm::CommunicatorOptions& o = g.comm;
  o.rank = rank;
  o.size = size;
  o.timeout = timeout;
  if (g.backend == engine::EngineBackend::kLocal) return g;
  auto root = ConnectStoreFromEnv("engine rank " + std::to_string(rank), timeout);
  o.store = std::make_shared<store::PrefixStore>(prefix, root);
  o.token = GetEnv("CADRE_JOB_TOKEN").value_or("");
  o.host = GetEnv("CADRE_HOST").value_or("");
  o.bind_address = GetEnv("CADRE_BIND_ADDRESS").value_or("");
  if (o.bind_address.empty()) o.bind_address = GetEnv("CADRE_LEARNER_ADDRESS").value_or("");
  if (auto grid = GetEnv("CADRE_HOST_GRID"); grid && !grid->empty()) {
    Status s = comm::ParseGrid(*grid, &o.hierarchy.host_grid);
    if (!s.ok()) throw Error(s.WithContext("CADRE_HOST_GRID"));
  }
  ReadCommunicatorTunables(&o);
  return g;
}

}  // namespace cadre::config
