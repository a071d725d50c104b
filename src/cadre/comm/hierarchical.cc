#include "cadre/comm/hierarchical.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string>

#include "cadre/comm/hierarchical_pipeline.h"

namespace cadre::comm {

std::vector<size_t> SplitCounts(size_t count, int parts) {
  if (parts < 1)
    throw Error(InvalidArgument("SplitCounts: parts must be >= 1, got " + std::to_string(parts)));
  const size_t p = static_cast<size_t>(parts);
  std::vector<size_t> counts(p, count / p);
  for (size_t i = 0; i < count % p; ++i) ++counts[i];
  return counts;
}

void HierarchyGroup::StreamedAllreduce(const PieceStream& s, DataType dtype, ReduceOp op) {
  const Status st = AllreducePiecesInTurn(s, ElementSize(dtype), [&](void* buffer, size_t count) {
    Allreduce(buffer, count, dtype, op);
  });
  if (!st.ok()) throw Error(st);
}

namespace internal {

namespace {

// counts[i]: how level i's group splits the n[i] elements it receives; this rank keeps
// n[i + 1] = counts[i][rank] of them for the level above.
struct OnePassPlan {
  std::vector<std::vector<size_t>> counts;
  std::vector<size_t> n;
  std::vector<size_t> offset;  // bytes into the scratch of the shard of level i >= 1
  size_t scratch_bytes = 0;
};

OnePassPlan PlanOnePass(std::span<HierarchyGroup* const> levels, size_t count, size_t esize) {
  const size_t m = levels.size();
  OnePassPlan p;
  p.counts.resize(m - 1);
  p.n.assign(m, 0);
  p.offset.assign(m, 0);
  p.n[0] = count;
  for (size_t i = 0; i + 1 < m; ++i) {
    p.counts[i] = SplitCounts(p.n[i], levels[i]->size());
    p.n[i + 1] = p.counts[i][static_cast<size_t>(levels[i]->rank())];
  }
  // One scratch area holds the shard of every level above 0 (n[1] + n[2] + ... <= count).
  for (size_t i = 1; i < m; ++i) {
    p.offset[i] = p.scratch_bytes;
    p.scratch_bytes += p.n[i] * esize;
  }
  return p;
}

}  // namespace

size_t OnePassScratchBytes(std::span<HierarchyGroup* const> levels, size_t count, size_t esize) {
  return PlanOnePass(levels, count, esize).scratch_bytes;
}

void OnePassAllreduce(std::span<HierarchyGroup* const> levels, const void* input, void* output,
                      size_t count, DataType dtype, ReduceOp op, unsigned char* scratch) {
  const size_t esize = ElementSize(dtype);
  const size_t m = levels.size();
  if (m == 1) {
    if (output != input && count > 0) std::memcpy(output, input, count * esize);
    levels[0]->Allreduce(output, count, dtype, op);
    return;
  }
  const OnePassPlan p = PlanOnePass(levels, count, esize);
  auto shard = [&](size_t level) -> void* { return scratch + p.offset[level]; };
  for (size_t i = 0; i + 1 < m; ++i) {
    const void* in = i == 0 ? input : shard(i);
    levels[i]->ReduceScatter(in, shard(i + 1), p.counts[i], dtype, op);
  }
  levels[m - 1]->Allreduce(shard(m - 1), p.n[m - 1], dtype, op);
  for (size_t i = m - 1; i-- > 0;) {
    void* out = i == 0 ? output : shard(i);
    levels[i]->Allgather(shard(i + 1), out, p.counts[i], dtype);
  }
}

}  // namespace internal

void LeveledAllreduce(std::span<HierarchyGroup* const> levels, const void* input, void* output,
                      size_t count, DataType dtype, ReduceOp op, const LeveledOptions& options) {
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
  std::vector<unsigned char> own;
  std::vector<unsigned char>* scratch = options.scratch != nullptr ? options.scratch : &own;
  const size_t bytes = count * esize;
  size_t chunks = 1;
  if (active.size() > 1 && options.pipeline_bytes > 0 && bytes > options.pipeline_bytes) {
    chunks = (bytes + options.pipeline_bytes - 1) / options.pipeline_bytes;
    if (options.max_chunks > 0) chunks = std::min(chunks, options.max_chunks);
    chunks = std::min(chunks, count);
  }
  if (chunks > 1) {
    const size_t need = internal::PipelinedScratchBytes(active, count, esize, chunks);
    if (scratch->size() < need) scratch->resize(need);
    internal::PipelinedAllreduce(active, input, output, count, dtype, op, chunks, scratch->data());
    return;
  }
  const size_t need = internal::OnePassScratchBytes(active, count, esize);
  if (scratch->size() < need) scratch->resize(need);
  internal::OnePassAllreduce(active, input, output, count, dtype, op, scratch->data());
}

std::vector<int> ChooseHostGrid(int hosts) {
  if (hosts < kMinGridHosts) return {hosts};
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
