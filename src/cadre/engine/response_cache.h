// ResponseCache: names negotiated before, so that steady-state steps send one small integer per
// tensor instead of its full description (Horovod's response cache).
//
// Every rank holds an identical cache: entries are added only by the controller, from the same
// negotiated data in the same order on every rank, so a bit position means the same tensor
// everywhere. An entry records each rank's request; a rank may send the bit only when its new
// request equals the one recorded for it. A full cache takes no new names (existing entries stay
// valid), which keeps the state identical without an eviction protocol. Not thread-safe: owned by
// the engine thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cadre/engine/request.h"

namespace cadre::engine {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}

  // The bit to send for `request` from `rank`, when the cached entry matches it exactly.
  std::optional<uint32_t> Lookup(const Request& request, int rank) const;
  // The request `rank` is known to have made for bit `bit`; throws Error(kProtocol) on a bit
  // that does not exist (a peer out of step).
  const Request& Get(uint32_t bit, int rank) const;
  // Records (or replaces) the per-rank requests of a negotiated name.
  void Put(const std::vector<Request>& per_rank);

  size_t size() const { return entries_.size(); }

 private:
  size_t capacity_;
  std::unordered_map<std::string, uint32_t> bit_by_name_;
  std::vector<std::vector<Request>> entries_;  // by bit, then by rank
};

}  // namespace cadre::engine
