#include "cadre/ps/shard_map.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace cadre::ps {

Status ShardMap::Build(const std::vector<VariableShape>& variables, int num_servers,
                       int64_t partition_bytes, ShardMap* out) {
  if (num_servers < 1) return InvalidArgument("shard map: need at least one server");
  const int64_t max_elems = partition_bytes / static_cast<int64_t>(sizeof(float));
  if (max_elems < 1)
    return InvalidArgument("shard map: partition_bytes " + std::to_string(partition_bytes) +
                           " is smaller than one float32 element");
  ShardMap map;
  map.server_bytes_.assign(static_cast<size_t>(num_servers), 0);
  std::vector<Partition> pieces;
  std::set<std::string> seen;
  for (const VariableShape& v : variables) {
    if (v.name.empty()) return InvalidArgument("shard map: a variable has an empty name");
    if (!seen.insert(v.name).second)
      return InvalidArgument("shard map: variable '" + v.name + "' is declared twice");
    if (v.count < 0)
      return InvalidArgument("shard map: variable '" + v.name + "' has a negative size");
    int64_t parts = std::max<int64_t>(1, (v.count + max_elems - 1) / max_elems);
    // Equal-sized partitions (differing by at most one element) balance better than a remainder.
    for (int64_t p = 0; p < parts; ++p) {
      int64_t begin = v.count * p / parts, end = v.count * (p + 1) / parts;
      pieces.push_back({v.name, static_cast<int32_t>(p), begin, end - begin, 0});
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const Partition& a, const Partition& b) {
    return std::tie(b.count, a.variable, a.index) < std::tie(a.count, b.variable, b.index);
  });
  for (Partition& p : pieces) {
    auto least = std::min_element(map.server_bytes_.begin(), map.server_bytes_.end());
    p.server = static_cast<int32_t>(least - map.server_bytes_.begin());
    *least += p.count * static_cast<int64_t>(sizeof(float));
    map.by_variable_[p.variable].push_back(p);
  }
  for (auto& [name, parts] : map.by_variable_)
    std::sort(parts.begin(), parts.end(),
              [](const Partition& a, const Partition& b) { return a.index < b.index; });
  *out = std::move(map);
  return Status::Ok();
}

const std::vector<Partition>& ShardMap::partitions(const std::string& variable) const {
  static const std::vector<Partition> kNone;
  auto it = by_variable_.find(variable);
  return it == by_variable_.end() ? kNone : it->second;
}

}  // namespace cadre::ps
