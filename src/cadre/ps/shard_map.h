// ShardMap: where each variable's elements live among the parameter servers.
//
// Variables no larger than `partition_bytes` are placed whole; larger ones are split into
// partitions of at most `partition_bytes`. Every piece goes to the server with the least bytes so
// far (ties to the lowest index), considering pieces largest first, then by name — so the map
// depends only on the set of variables, never on declaration order, and every worker that
// declares the same variables computes the same map without talking to the others.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::ps {

struct Partition {
  std::string variable;
  int32_t index = 0;   // partition number within the variable
  int64_t offset = 0;  // first element
  int64_t count = 0;   // elements
  int32_t server = 0;  // index into the server list
};

struct VariableShape {
  std::string name;
  int64_t count = 0;  // elements (float32)
};

class ShardMap {
 public:
  // Fails on an empty name, a duplicate name, a negative count, no servers or a partition size
  // smaller than one element.
  static Status Build(const std::vector<VariableShape>& variables, int num_servers,
                      int64_t partition_bytes, ShardMap* out);

  // The partitions of `variable` in element order; empty when the variable is unknown.
  const std::vector<Partition>& partitions(const std::string& variable) const;
  bool contains(const std::string& variable) const { return by_variable_.count(variable) > 0; }
  // Bytes placed on each server.
  const std::vector<int64_t>& server_bytes() const { return server_bytes_; }
  int num_servers() const { return static_cast<int>(server_bytes_.size()); }

 private:
  std::map<std::string, std::vector<Partition>> by_variable_;
  std::vector<int64_t> server_bytes_;
};

}  // namespace cadre::ps
