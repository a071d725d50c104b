#include "cadre/engine/backend.h"

#include <cstring>
#include <numeric>
#include <string>

#include "cadre/base/status.h"
#include "cadre/comm/reduce.h"
#include "cadre/engine/dtype.h"

namespace cadre::engine {

namespace {

GatherBackend::Bytes Copy(const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return GatherBackend::Bytes(b, b + n);
}

void CheckSize(const std::vector<GatherBackend::Bytes>& all, int rank, size_t expected,
               const char* what) {
  if (all[rank].size() != expected) {
    throw Error(MismatchError(std::string(what) + ": rank " + std::to_string(rank) + " sent " +
                              std::to_string(all[rank].size()) + " bytes, expected " +
                              std::to_string(expected)));
  }
}

}  // namespace

void GatherBackend::AllgatherFixed(const void* in, void* out, size_t bytes) {
  auto all = ExchangeBytes(Copy(in, bytes));
  uint8_t* o = static_cast<uint8_t*>(out);
  for (int r = 0; r < size(); ++r) {
    CheckSize(all, r, bytes, "allgather");
    if (bytes) std::memcpy(o + r * bytes, all[r].data(), bytes);
  }
}

void GatherBackend::Allgather(const void* in, void* out, const std::vector<size_t>& counts,
                              DataType dtype) {
  const size_t es = comm::ElementSize(dtype);
  auto all = ExchangeBytes(Copy(in, counts[rank()] * es));
  uint8_t* o = static_cast<uint8_t*>(out);
  for (int r = 0; r < size(); ++r) {
    CheckSize(all, r, counts[r] * es, "allgather");
    if (!all[r].empty()) std::memcpy(o, all[r].data(), all[r].size());
    o += counts[r] * es;
  }
}

void GatherBackend::Allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) {
  const size_t bytes = count * comm::ElementSize(dtype);
  auto all = ExchangeBytes(Copy(buffer, bytes));
  for (int r = 0; r < size(); ++r) CheckSize(all, r, bytes, "allreduce");
  if (bytes == 0) return;
  // Reduce in rank order on every rank so that all ranks get bit-identical results.
  std::memcpy(buffer, all[0].data(), bytes);
  for (int r = 1; r < size(); ++r) comm::Reduce(buffer, buffer, all[r].data(), count, dtype, op);
}

void GatherBackend::Broadcast(void* buffer, size_t count, DataType dtype, int root) {
  const size_t bytes = count * comm::ElementSize(dtype);
  auto all = ExchangeBytes(rank() == root ? Copy(buffer, bytes) : Bytes());
  CheckSize(all, root, bytes, "broadcast");
  if (rank() != root && bytes) std::memcpy(buffer, all[root].data(), bytes);
}

void GatherBackend::Alltoall(const void* in, void* out, const std::vector<size_t>& send_counts,
                             const std::vector<size_t>& recv_counts, DataType dtype) {
  const size_t es = comm::ElementSize(dtype);
  const size_t total = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
  // Every rank sends its whole input; receivers pick their block (fine for a test backend).
  Bytes mine;
  for (size_t c : send_counts) PutCount(c, mine);
  const uint8_t* i = static_cast<const uint8_t*>(in);
  mine.insert(mine.end(), i, i + total * es);
  auto all = ExchangeBytes(std::move(mine));
  uint8_t* o = static_cast<uint8_t*>(out);
  for (int r = 0; r < size(); ++r) {
    const Bytes& b = all[r];
    const size_t header = 8 * static_cast<size_t>(size());
    if (b.size() < header) CheckSize(all, r, header, "alltoall");
    size_t offset = 0;
    size_t mine_count = 0;
    for (int j = 0; j < size(); ++j) {
      uint64_t c;
      std::memcpy(&c, b.data() + 8 * j, 8);
      if (j < rank()) offset += c;
      if (j == rank()) mine_count = c;
    }
    if (mine_count != recv_counts[r] || header + (offset + mine_count) * es > b.size()) {
      throw Error(MismatchError("alltoall: rank " + std::to_string(r) + " sends " +
                                std::to_string(mine_count) + " elements to rank " +
                                std::to_string(rank()) + ", which expects " +
                                std::to_string(recv_counts[r])));
    }
    if (mine_count) std::memcpy(o, b.data() + header + offset * es, mine_count * es);
    o += mine_count * es;
  }
}

void GatherBackend::ReduceScatter(const void* in, void* out, const std::vector<size_t>& counts,
                                  DataType dtype, ReduceOp op) {
  const size_t es = comm::ElementSize(dtype);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  auto all = ExchangeBytes(Copy(in, total * es));
  size_t offset = 0;
  for (int j = 0; j < rank(); ++j) offset += counts[j];
  const size_t mine = counts[rank()];
  for (int r = 0; r < size(); ++r) CheckSize(all, r, total * es, "reducescatter");
  if (mine == 0) return;
  std::memcpy(out, all[0].data() + offset * es, mine * es);
  for (int r = 1; r < size(); ++r) {
    comm::Reduce(out, out, all[r].data() + offset * es, mine, dtype, op);
  }
}

void GatherBackend::PutCount(uint64_t c, Bytes& out) {
  uint8_t b[8];
  std::memcpy(b, &c, 8);
  out.insert(out.end(), b, b + 8);
}

// ---- InProcessGroup ----

class InProcessGroup::RankBackend final : public GatherBackend {
 public:
  RankBackend(std::shared_ptr<InProcessGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size_; }

 protected:
  std::vector<Bytes> ExchangeBytes(Bytes mine) override {
    return group_->Exchange(rank_, round_++, std::move(mine));
  }

 private:
  std::shared_ptr<InProcessGroup> group_;
  const int rank_;
  uint64_t round_ = 0;
};

std::shared_ptr<InProcessGroup> InProcessGroup::Create(int size, Duration timeout) {
  if (size < 1) throw Error(InvalidArgument("InProcessGroup: size must be >= 1"));
  return std::shared_ptr<InProcessGroup>(new InProcessGroup(size, timeout));
}

std::unique_ptr<CollectiveBackend> InProcessGroup::Backend(int rank) {
  if (rank < 0 || rank >= size_) {
    throw Error(InvalidArgument("InProcessGroup: rank " + std::to_string(rank) + " out of range"));
  }
  return std::make_unique<RankBackend>(shared_from_this(), rank);
}

void InProcessGroup::Abort(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_rank_ < 0) aborted_rank_ = rank;
  cv_.notify_all();
}

std::vector<GatherBackend::Bytes> InProcessGroup::Exchange(int rank, uint64_t round,
                                                           GatherBackend::Bytes mine) {
  std::unique_lock<std::mutex> lock(mu_);
  auto fail_if_aborted = [&] {
    if (aborted_rank_ >= 0) {
      throw Error(IoError("rank " + std::to_string(aborted_rank_) + " (in-process) went away"));
    }
  };
  fail_if_aborted();
  Round& r = rounds_[round];
  if (r.data.empty()) {
    r.data.resize(size_);
    r.arrived.assign(size_, false);
  }
  r.data[rank] = std::move(mine);
  r.arrived[rank] = true;
  ++r.arrived_count;
  cv_.notify_all();
  const Deadline deadline(timeout_);
  while (r.arrived_count < size_) {
    fail_if_aborted();
    if (cv_.wait_until(lock, deadline.at()) == std::cv_status::timeout && r.arrived_count < size_) {
      std::string missing;
      for (int i = 0; i < size_; ++i) {
        if (!r.arrived[i]) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
      }
      throw Error(TimeoutError("rank " + std::to_string(rank) + " waited " +
                               std::to_string(timeout_.count()) + " ms for rank(s) " + missing));
    }
  }
  std::vector<GatherBackend::Bytes> result = r.data;
  if (++r.taken == size_) rounds_.erase(round);
  return result;
}

}  // namespace cadre::engine
