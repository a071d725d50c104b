#include "cadre/engine/group.h"

#include <string>

#include "cadre/comm/in_process.h"
#include "cadre/comm/store_communicator.h"

namespace cadre::engine {

Status ParseEngineBackend(std::string_view text, EngineBackend* out) {
  if (text == "auto") {
    *out = EngineBackend::kAuto;
  } else if (text == "comm") {
    *out = EngineBackend::kComm;
  } else if (text == "store") {
    *out = EngineBackend::kStore;
  } else if (text == "local") {
    *out = EngineBackend::kLocal;
  } else {
    return InvalidArgument("unknown engine backend '" + std::string(text) +
                           "' (known: auto, comm, store, local)");
  }
  return Status::Ok();
}

std::unique_ptr<comm::Communicator> CreateEngineGroup(EngineGroupOptions options) {
  comm::CommunicatorOptions& o = options.comm;
  switch (options.backend) {
    case EngineBackend::kLocal:
      if (o.size != 1)
        throw Error(InvalidArgument("the 'local' engine backend serves size 1 only"));
      return comm::InProcessGroup::Create(1, o.timeout)->Member(0);
    case EngineBackend::kStore:
      if (!o.store) throw Error(InvalidArgument("the 'store' engine backend needs a store"));
      return std::make_unique<comm::StoreCommunicator>(o.store, o.rank, o.size, o.timeout);
    case EngineBackend::kAuto:
    case EngineBackend::kComm:
      break;
  }
  return comm::Communicator::Create(std::move(o));
}

}  // namespace cadre::engine
