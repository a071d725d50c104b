// The engine's group of ranks, chosen and assembled here from values: the edges read the
// environment and connect to the job's store (config::EngineGroupOptionsFromEnv, called by the
// Python binding's entry, python/src/engine_bindings.cc) and fill EngineGroupOptions; nothing
// here or below reads the environment.
#pragma once

#include <memory>
#include <string_view>

#include "cadre/base/status.h"
#include "cadre/comm/communicator.h"

namespace cadre::engine {

enum class EngineBackend {
  kAuto,   // the communication core (comm::Communicator::Create); the default
  kComm,   // the same, asked for by name
  kStore,  // comm::StoreCommunicator through comm.store: slow, for bring-up and small jobs
  kLocal,  // a group of one with no store (a script run without a launcher)
};

// "auto", "comm", "store", "local"; kInvalidArgument naming the known ones otherwise.
Status ParseEngineBackend(std::string_view text, EngineBackend* out);

struct EngineGroupOptions {
  EngineBackend backend = EngineBackend::kAuto;
  // rank, size, timeout for every backend; store (the rendezvous, under a prefix of its own per
  // engine) for all but kLocal; the rest (token, host, bind address, shared memory, hierarchy)
  // for the communication core.
  comm::CommunicatorOptions comm;
};

// Collective over the group's ranks (the communication core rendezvouses). Throws cadre::Error:
// kInvalidArgument for kLocal with more than one rank or a missing store.
std::unique_ptr<comm::Communicator> CreateEngineGroup(EngineGroupOptions options);

}  // namespace cadre::engine
