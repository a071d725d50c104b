#include "cadre/comm/shm_collectives.h"

#include <algorithm>
#include <cstring>

#include "cadre/comm/reduce.h"

namespace cadre::comm::shm_algo {
namespace {

using transport::shm::OpDescriptor;

enum Kind : uint32_t {
  kAllreduce = 1,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kAlltoall,
  kBarrier
};

// Allreduce at or below this many bytes: every rank reduces the whole message from all slots
// (one synchronisation). Above: each rank reduces a 1/n slice, then everyone copies (two).
constexpr size_t kSmallAllreduceBytes = 32 << 10;

// Allreduce above this many bytes, when every rank has a core of its own, works in chunks of at
// most kLargeAllreduceChunkBytes, so that a chunk's working set (its part of the input plus the
// slot pieces) stays in a core's L2 while the input streams from memory. Measured on 2 ranks
// (docs/benchmarks.md, "Chunks for large allreduces"): 256 KiB chunks are 8-20% faster than
// 1 MiB at 16-64 MiB, and 8-9% slower at 512 KiB-1 MiB, where the whole input is still in
// cache; equal at 4 MiB. With 3-4 ranks on 2 cores they were ~8% slower.
constexpr size_t kLargeAllreduceBytes = 8 << 20;
constexpr size_t kLargeAllreduceChunkBytes = 256 << 10;

std::string_view KindName(uint32_t kind) {
  switch (kind) {
    case kAllreduce:
      return "allreduce";
    case kBroadcast:
      return "broadcast";
    case kAllgather:
      return "allgather";
    case kReduceScatter:
      return "reducescatter";
    case kAlltoall:
      return "alltoall";
    case kBarrier:
      return "barrier";
  }
  return "?";
}

std::string Describe(const OpDescriptor& d) {
  return std::string(KindName(d.kind)) + "(count " + std::to_string(d.count) + ", " +
         std::string(DataTypeName(static_cast<DataType>(d.detail & 0xff))) + ", detail " +
         std::to_string(d.detail >> 8) + ")";
}

uint32_t HashCounts(const std::vector<size_t>& counts) {
  uint32_t h = 2166136261u;
  for (size_t c : counts) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((c >> (8 * i)) & 0xff)) * 16777619u;
  }
  return h;
}

OpDescriptor Desc(Kind kind, DataType dtype, uint32_t extra, uint64_t count) {
  return OpDescriptor{kind, static_cast<uint32_t>(dtype) | (extra << 8), count};
}

// One step: stamp the descriptor, publish arrival, wait for everyone, compare descriptors.
Status Arrive(ShmGroup& g, uint32_t step, const OpDescriptor& mine, Deadline deadline) {
  g.SetDescriptor(step, mine);
  g.Publish(ShmGroup::kArrived, step);
  CADRE_RETURN_IF_ERROR(g.WaitAll(ShmGroup::kArrived, step, deadline));
  for (int r = 0; r < g.size(); ++r) {
    OpDescriptor theirs = g.descriptor(r, step);
    if (!(theirs == mine)) {
      return MismatchError(g.name(r) + " called " + Describe(theirs) + " while " +
                           g.name(g.rank()) + " called " + Describe(mine));
    }
  }
  return Status::Ok();
}

size_t ChunkBytes(const ShmGroup& g, size_t elem, size_t limit) {
  size_t c = g.slot_bytes();
  if (limit != 0) c = std::min(c, limit);
  return std::max(elem, c / elem * elem);
}

}  // namespace

Status Allreduce(ShmGroup& g, const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                 size_t segment_bytes, Deadline deadline) {
  const int n = g.size();
  const int me = g.rank();
  const size_t elem = ElementSize(dtype);
  const size_t bytes = count * elem;
  size_t limit = segment_bytes;
  if (bytes > kLargeAllreduceBytes) {
    // Only where each rank has a core: with more ranks than cores the extra synchronisations of
    // smaller chunks cost more (each can be a context switch) than the cache saves.
    bool own_cpus = false;
    CADRE_RETURN_IF_ERROR(g.RanksHaveOwnCpus(deadline, &own_cpus));
    if (own_cpus) {
      limit = limit == 0 ? kLargeAllreduceChunkBytes : std::min(limit, kLargeAllreduceChunkBytes);
    }
  }
  const size_t chunk = ChunkBytes(g, elem, limit);
  const OpDescriptor desc = Desc(kAllreduce, dtype, static_cast<uint32_t>(op), count);
  auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  std::vector<const void*> srcs(n);

  if (bytes <= std::min(chunk, kSmallAllreduceBytes)) {
    uint32_t step = g.NextStep();
    std::memcpy(g.slot(me, step), src, bytes);
    CADRE_RETURN_IF_ERROR(Arrive(g, step, desc, deadline));
    for (int r = 0; r < n; ++r) srcs[r] = g.slot(r, step);  // rank order: same result everywhere
    ReduceMany(dst, srcs.data(), n, count, dtype, op);
    return Status::Ok();
  }

  const size_t chunk_elems = chunk / elem;
  for (size_t base = 0; base < count; base += chunk_elems) {
    const size_t cc = std::min(chunk_elems, count - base);
    // Slice r of this chunk is reduced by rank r; boundaries on 64-element multiples.
    auto lo = [&](int r) { return r == n ? cc : (cc * r / n) & ~size_t{63}; };
    const size_t off = base * elem;
    uint32_t step = g.NextStep();
    uint8_t* mine = g.slot(me, step);
    // Peers need every slice but ours; ours is read straight from the input below.
    if (lo(me) > 0) std::memcpy(mine, src + off, lo(me) * elem);
    if (lo(me + 1) < cc) {
      std::memcpy(mine + lo(me + 1) * elem, src + off + lo(me + 1) * elem,
                  (cc - lo(me + 1)) * elem);
    }
    CADRE_RETURN_IF_ERROR(Arrive(g, step, desc, deadline));
    const size_t s_off = lo(me) * elem;
    srcs[0] = src + off + s_off;
    for (int i = 1, r = 0; r < n; ++r) {
      if (r != me) srcs[i++] = g.slot(r, step) + s_off;
    }
    ReduceMany(mine + s_off, srcs.data(), n, lo(me + 1) - lo(me), dtype, op);
    g.Publish(ShmGroup::kReduced, step);
    CADRE_RETURN_IF_ERROR(g.WaitAll(ShmGroup::kReduced, step, deadline));
    for (int i = 0; i < n; ++i) {
      int r = (me + i) % n;
      size_t a = lo(r) * elem, b = lo(r + 1) * elem;
      if (b > a) std::memcpy(dst + off + a, g.slot(r, step) + a, b - a);
    }
  }
  return Status::Ok();
}

Status Broadcast(ShmGroup& g, void* buffer, size_t count, DataType dtype, int root,
                 Deadline deadline) {
  const size_t elem = ElementSize(dtype);
  const size_t bytes = count * elem;
  const size_t chunk = ChunkBytes(g, elem, 0);
  const OpDescriptor desc = Desc(kBroadcast, dtype, static_cast<uint32_t>(root), count);
  auto* buf = static_cast<uint8_t*>(buffer);
  for (size_t off = 0; off < bytes; off += chunk) {
    size_t len = std::min(chunk, bytes - off);
    uint32_t step = g.NextStep();
    if (g.rank() == root) std::memcpy(g.slot(root, step), buf + off, len);
    CADRE_RETURN_IF_ERROR(Arrive(g, step, desc, deadline));
    if (g.rank() != root) std::memcpy(buf + off, g.slot(root, step), len);
  }
  return Status::Ok();
}

Status Allgatherv(ShmGroup& g, const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype, Deadline deadline) {
  const int n = g.size();
  const int me = g.rank();
  const size_t elem = ElementSize(dtype);
  const size_t chunk = ChunkBytes(g, elem, 0);
  size_t total = 0, largest = 0;
  std::vector<size_t> offset(n);
  for (int r = 0; r < n; ++r) {
    offset[r] = total * elem;
    total += counts[r];
    largest = std::max(largest, counts[r] * elem);
  }
  const OpDescriptor desc = Desc(kAllgather, dtype, HashCounts(counts) & 0xffffff, total);
  auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  // Our own block: memmove, since `in` may already be (or overlap) our slot of `out`.
  if (src != dst + offset[me]) std::memmove(dst + offset[me], src, counts[me] * elem);
  const size_t rounds = (largest + chunk - 1) / chunk;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t off = k * chunk;
    uint32_t step = g.NextStep();
    size_t my_bytes = counts[me] * elem;
    if (off < my_bytes) {
      std::memcpy(g.slot(me, step), dst + offset[me] + off, std::min(chunk, my_bytes - off));
    }
    CADRE_RETURN_IF_ERROR(Arrive(g, step, desc, deadline));
    for (int r = 0; r < n; ++r) {
      size_t b = counts[r] * elem;
      if (r != me && off < b)
        std::memcpy(dst + offset[r] + off, g.slot(r, step), std::min(chunk, b - off));
    }
  }
  return Status::Ok();
}

Status ReduceScatter(ShmGroup& g, const void* in, void* out, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op, Deadline deadline) {
  const int n = g.size();
  const int me = g.rank();
  const size_t elem = ElementSize(dtype);
  // Each slot holds one piece per destination block, so every rank reduces its own block in
  // parallel with the others.
  const size_t piece = std::max(elem, g.slot_bytes() / n / elem * elem);
  size_t total = 0, largest = 0;
  std::vector<size_t> offset(n);
  for (int r = 0; r < n; ++r) {
    offset[r] = total * elem;
    total += counts[r];
    largest = std::max(largest, counts[r] * elem);
  }
  const OpDescriptor desc =
      Desc(kReduceScatter, dtype, (HashCounts(counts) & 0xfff0) | static_cast<uint32_t>(op), total);
  auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  std::vector<const void*> srcs(n);
  const size_t rounds = (largest + piece - 1) / piece;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t off = k * piece;
    uint32_t step = g.NextStep();
    for (int j = 0; j < n; ++j) {
      size_t b = counts[j] * elem;
      if (j != me && off < b) {
        std::memcpy(g.slot(me, step) + j * piece, src + offset[j] + off, std::min(piece, b - off));
      }
    }
    CADRE_RETURN_IF_ERROR(Arrive(g, step, desc, deadline));
    size_t b = counts[me] * elem;
    if (off < b) {
      // Rank order, reading our own contribution from the input: deterministic on every rank.
      for (int r = 0; r < n; ++r) {
        srcs[r] = r == me ? src + offset[me] + off : g.slot(r, step) + me * piece;
      }
      ReduceMany(dst + off, srcs.data(), n, std::min(piece, b - off) / elem, dtype, op);
    }
  }
  return Status::Ok();
}

Status Alltoall(ShmGroup& g, const void* in, void* out, const std::vector<size_t>& send_counts,
                const std::vector<size_t>& recv_counts, DataType dtype, Deadline deadline) {
  const int n = g.size();
  const int me = g.rank();
  const size_t elem = ElementSize(dtype);
  // Step 0: publish our send counts; check them against what each peer expects from us, and agree
  // on the number of rounds (the largest block anywhere).
  uint32_t step = g.NextStep();
  std::memcpy(g.slot(me, step), send_counts.data(), n * sizeof(size_t));
  const OpDescriptor desc = Desc(kAlltoall, dtype, 0, 0);
  CADRE_RETURN_IF_ERROR(Arrive(g, step, desc, deadline));
  size_t largest = 0;
  for (int r = 0; r < n; ++r) {
    const auto* theirs = reinterpret_cast<const size_t*>(g.slot(r, step));
    for (int j = 0; j < n; ++j) largest = std::max(largest, theirs[j] * elem);
    if (theirs[me] != recv_counts[r]) {
      return MismatchError(g.name(r) + " sends " + std::to_string(theirs[me]) + " elements to " +
                           g.name(me) + ", which expects " + std::to_string(recv_counts[r]));
    }
  }
  std::vector<size_t> soff(n), roff(n);
  for (int r = 1; r < n; ++r) {
    soff[r] = soff[r - 1] + send_counts[r - 1] * elem;
    roff[r] = roff[r - 1] + recv_counts[r - 1] * elem;
  }
  auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  std::memcpy(dst + roff[me], src + soff[me], send_counts[me] * elem);
  const size_t piece = std::max(elem, g.slot_bytes() / n / elem * elem);
  const size_t rounds = (largest + piece - 1) / piece;
  for (size_t k = 0; k < rounds; ++k) {
    const size_t off = k * piece;
    step = g.NextStep();
    for (int j = 0; j < n; ++j) {
      size_t b = send_counts[j] * elem;
      if (j != me && off < b) {
        std::memcpy(g.slot(me, step) + j * piece, src + soff[j] + off, std::min(piece, b - off));
      }
    }
    CADRE_RETURN_IF_ERROR(Arrive(g, step, desc, deadline));
    for (int r = 0; r < n; ++r) {
      size_t b = recv_counts[r] * elem;
      if (r != me && off < b) {
        std::memcpy(dst + roff[r] + off, g.slot(r, step) + me * piece, std::min(piece, b - off));
      }
    }
  }
  return Status::Ok();
}

Status Barrier(ShmGroup& g, Deadline deadline) {
  return Arrive(g, g.NextStep(), Desc(kBarrier, DataType::kUInt8, 0, 0), deadline);
}

}  // namespace cadre::comm::shm_algo
