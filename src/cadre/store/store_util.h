// Helpers shared by Store implementations: counter encoding (decimal text, so counters are
// readable with get_string) and the wording of timeout errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cadre/store/store.h"

namespace cadre::store {

Bytes EncodeCounter(int64_t value);
// Throws Error(kInvalidArgument) when the stored value is not a counter.
int64_t DecodeCounter(const std::string& key, const Bytes& value);
std::string MissingKeysMessage(const std::vector<std::string>& missing, Duration timeout);

}  // namespace cadre::store
