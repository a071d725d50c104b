// The environment read into the core's options, in one place: every variable that configures
// net/, store/, transport/, comm/ or engine/ (docs/environment.md: name, meaning, default,
// reader) is read here and nowhere below, so the core takes its configuration only as values and
// a test process can hold ranks configured differently. The callers are the edges: the Python
// extension's entry points (python/src) and the cadre program (cli/, bench/).
//
// Every function reads the process's environment when it is called (nothing is cached). A value
// that does not parse throws cadre::Error(kInvalidArgument) naming the variable; unset or empty
// means the default of the options struct.
#pragma once

#include <memory>
#include <string>

#include "cadre/base/deadline.h"
#include "cadre/comm/communicator.h"
#include "cadre/engine/engine.h"
#include "cadre/engine/group.h"
#include "cadre/store/store.h"

namespace cadre::config {

// CADRE_HOSTS: the job's hosts file when the learners' names resolve only for cadre (the runner's
// fallback without a mount namespace); "" when unset.
std::string HostsFileFromEnv();

// The engine's tunables. HOROVOD_* / CADRE_*: CYCLE_TIME (ms, fractional), FUSION_THRESHOLD
// (bytes), CACHE_CAPACITY, STALL_CHECK_TIME_SECONDS, STALL_SHUTDOWN_TIME_SECONDS, TIMELINE
// (path), TIMELINE_MARK_CYCLES (0/1), AUTOTUNE_LOG (path); CADRE_ wins. CADRE_ only:
// INLINE_BYTES, SPIN_US, BATCH_WAIT_MS (`auto`, the default, or fractional milliseconds),
// FUSION_TENSOR_LIMIT, ALLREDUCE_ALGORITHM (else HOROVOD_HIERARCHICAL_ALLREDUCE: 1 hierarchical,
// 0 ring).
engine::EngineOptions EngineOptionsFromEnv();

// The communication core's tunables of this process, set on *options (its other fields are left
// as they are): CADRE_SHM_SLOT_BYTES -> shm_slot_bytes, CADRE_SHM_SPIN_US -> shm_spin_max,
// CADRE_HOSTS -> hosts_file.
void ReadCommunicatorTunables(comm::CommunicatorOptions* options);

// The learner side of the job runner's contract: connects to CADRE_STORE (host:port) with the
// token in CADRE_JOB_TOKEN, names resolved through CADRE_HOSTS. Throws cadre::Error
// (kInvalidArgument) naming the variable when one is missing or malformed, and the connection
// errors of store::TcpStore otherwise.
std::shared_ptr<store::Store> ConnectStoreFromEnv(std::string identity = "store-client",
                                                  Duration timeout = store::Store::kDefaultTimeout);

// The engine's group for a learner whose rank, size and timeout the caller decided (cadre.torch):
// `backend` by name (engine::ParseEngineBackend); unless it is "local", the job's store
// (ConnectStoreFromEnv, under `prefix` so that process sets and re-initialisations do not clash),
// CADRE_JOB_TOKEN, this learner's CADRE_HOST, where to listen (CADRE_BIND_ADDRESS, else
// CADRE_LEARNER_ADDRESS, else the address CADRE_HOST resolves to; every interface only when asked
// for with 0.0.0.0), the hierarchical allreduce's CADRE_HOST_GRID ("AxB..", DDL's multi-ring)
// and ReadCommunicatorTunables. engine::CreateEngineGroup assembles the group from the result.
engine::EngineGroupOptions EngineGroupOptionsFromEnv(const std::string& backend, int rank, int size,
                                                     Duration timeout, const std::string& prefix);

}  // namespace cadre::config
