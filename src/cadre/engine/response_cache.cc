#include "cadre/engine/response_cache.h"

#include "cadre/base/status.h"

namespace cadre::engine {

std::optional<uint32_t> ResponseCache::Lookup(const Request& request, int rank) const {
  auto it = bit_by_name_.find(request.name);
  if (it == bit_by_name_.end()) return std::nullopt;
  const auto& per_rank = entries_[it->second];
  if (rank < 0 || static_cast<size_t>(rank) >= per_rank.size()) return std::nullopt;
  if (!(per_rank[rank] == request)) return std::nullopt;
  return it->second;
}

const Request& ResponseCache::Get(uint32_t bit, int rank) const {
  if (bit >= entries_.size() || rank < 0 || static_cast<size_t>(rank) >= entries_[bit].size()) {
    throw Error(ProtocolError("rank " + std::to_string(rank) + " sent unknown cache bit " +
                              std::to_string(bit) + " (cache holds " +
                              std::to_string(entries_.size()) + ")"));
  }
  return entries_[bit][rank];
}

void ResponseCache::Put(const std::vector<Request>& per_rank) {
  if (per_rank.empty()) return;
  const std::string& name = per_rank[0].name;
  auto it = bit_by_name_.find(name);
  if (it != bit_by_name_.end()) {
    entries_[it->second] = per_rank;
    return;
  }
  if (entries_.size() >= capacity_) return;
  bit_by_name_.emplace(name, static_cast<uint32_t>(entries_.size()));
  entries_.push_back(per_rank);
}

}  // namespace cadre::engine
