#include "cadre/comm/hierarchical.h"

#include <charconv>
#include <cstring>
#include <string>

namespace cadre::comm {

std::vector<size_t> SplitCounts(size_t count, int parts) {
  if (parts < 1)
    throw Error(InvalidArgument("SplitCounts: parts must be >= 1, got " + std::to_string(parts)));
  const size_t p = static_cast<size_t>(parts);
  std::vector<size_t> counts(p, count / p);
  for (size_t i = 0; i < count % p; ++i) ++counts[i];
  return counts;
}

void LeveledAllreduce(std::span<HierarchyGroup* const> levels, const void* input, void* output,
                      size_t count, DataType dtype, ReduceOp op,
                      std::vector<unsigned char>* scratch) {
  std::vector<HierarchyGroup*> active;
  for (size_t i = 0; i < levels.size(); ++i) {
    if (levels[i] == nullptr) {
      throw Error(
          InvalidArgument("hierarchical allreduce: level " + std::to_string(i) + " has no group"));
    }
    if (levels[i]->size() > 1) active.push_back(levels[i]);
  }
  const size_t esize = ElementSize(dtype);
  if (count == 0) return;  // every rank has the same count, so every rank returns here
  if (active.empty()) {    // a world of one rank
    if (output != input) std::memcpy(output, input, count * esize);
    return;
  }
  const size_t m = active.size();
  if (m == 1) {
    if (output != input) std::memcpy(output, input, count * esize);
    active[0]->Allreduce(output, count, dtype, op);
    return;
  }

  // counts[i]: how level i's group splits the n[i] elements it receives; this rank keeps
  // n[i + 1] = counts[i][rank] of them for the level above.
  std::vector<std::vector<size_t>> counts(m - 1);
  std::vector<size_t> n(m);
  n[0] = count;
  for (size_t i = 0; i + 1 < m; ++i) {
    counts[i] = SplitCounts(n[i], active[i]->size());
    n[i + 1] = counts[i][static_cast<size_t>(active[i]->rank())];
  }
  // One scratch area holds the shard of every level above 0 (n[1] + n[2] + ... <= count).
  std::vector<size_t> offset(m, 0);
  size_t total = 0;
  for (size_t i = 1; i < m; ++i) {
    offset[i] = total;
    total += n[i] * esize;
  }
  std::vector<unsigned char> own;
  if (scratch == nullptr) scratch = &own;
  if (scratch->size() < total) scratch->resize(total);
  auto shard = [&](size_t level) -> void* { return scratch->data() + offset[level]; };

  for (size_t i = 0; i + 1 < m; ++i) {
    const void* in = i == 0 ? input : shard(i);
    active[i]->ReduceScatter(in, shard(i + 1), counts[i], dtype, op);
  }
  active[m - 1]->Allreduce(shard(m - 1), n[m - 1], dtype, op);
  for (size_t i = m - 1; i-- > 0;) {
    void* out = i == 0 ? output : shard(i);
    active[i]->Allgather(shard(i + 1), out, counts[i], dtype);
  }
}

std::vector<int> ChooseHostGrid(int hosts) {
  if (hosts < 4) return {hosts};
  int best = 1;
  for (int a = 2; a * a <= hosts; ++a) {
    if (hosts % a == 0) best = a;
  }
  if (best == 1) return {hosts};  // prime: a grid would have a dimension of 1
  return {best, hosts / best};
}

Status ParseGrid(std::string_view spec, std::vector<int>* dims) {
  dims->clear();
  if (spec.empty()) return InvalidArgument("grid is empty (expected e.g. \"2x2\")");
  size_t start = 0;
  while (true) {
    const size_t end = spec.find('x', start);
    const std::string_view part =
        spec.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    int value = 0;
    const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || ptr != part.data() + part.size() || value < 1) {
      dims->clear();
      return InvalidArgument("grid \"" + std::string(spec) + "\": dimension \"" +
                             std::string(part) + "\" is not a positive integer");
    }
    dims->push_back(value);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return {};
}

std::string GridToString(const std::vector<int>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s;
}

}  // namespace cadre::comm
