// Helpers shared by Store implementations: counter encoding (decimal text, so counters are
// readable with get_string) and the wording of timeout errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/store/store.h"

namespace cadre::store {

Bytes EncodeCounter(int64_t value);
// Throws Error(kInvalidArgument) when the stored value is not a counter.
int64_t DecodeCounter(const std::string& key, const Bytes& value);
std::string MissingKeysMessage(const std::vector<std::string>& missing, Duration timeout);

// The Status for a rendezvous wait on the store that threw `e`. kTimeout: what was awaited never
// came, "<absent>: <e>" ("rank 1 did not join the communicator: ..."). Anything else (the store's
// connection broke, its process died) keeps its code and blames the store, not the peer: "the
// rendezvous store failed before <awaited>: <e>" ("... before rank 1 joined the communicator").
Status StoreWaitError(const Error& e, const std::string& absent, const std::string& awaited);

}  // namespace cadre::store
