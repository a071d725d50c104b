// Test double for HierarchyGroup: groups of threads of one process (c10d's FakeProcessGroup idea).
// Each collective is an exchange — every member deposits its bytes, every member gets all of
// them — and the reduction is done locally with the comm reduce kernels, so the fake is obviously
// correct and the algorithm under test is the only thing being tested. Each member also records
// the calls it made (kind and element count) so tests can check how much data each level moved.
//
// Thread-safety: one FakeGroupState is shared by its members' threads; each FakeGroup is used by
// one thread. A member that does not arrive within the timeout makes the others throw kTimeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/comm/hierarchical.h"
#include "cadre/comm/reduce.h"

namespace cadre::comm::testing {

class FakeGroupState {
 public:
  using Bytes = std::vector<unsigned char>;
  FakeGroupState(int size, std::chrono::milliseconds timeout) : size_(size), timeout_(timeout) {}
  int size() const { return size_; }

  // Returns every member's bytes of this member's `round`-th call, in member order.
  std::vector<Bytes> Exchange(int member, uint64_t round, Bytes mine) {
    std::unique_lock lock(mu_);
    Round& r = rounds_[round];
    if (r.data.empty()) r.data.resize(static_cast<size_t>(size_));
    r.data[static_cast<size_t>(member)] = std::move(mine);
    ++r.arrived;
    cv_.notify_all();
    if (!cv_.wait_for(lock, timeout_, [&] { return r.arrived == size_; })) {
      throw Error(TimeoutError("fake group: member " + std::to_string(member) + " waited for " +
                               std::to_string(size_ - r.arrived) + " member(s) in round " +
                               std::to_string(round)));
    }
    std::vector<Bytes> all = r.data;
    if (++r.taken == size_) rounds_.erase(round);
    return all;
  }

 private:
  struct Round {
    std::vector<Bytes> data;
    int arrived = 0;
    int taken = 0;
  };
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Round> rounds_;  // GUARDED_BY(mu_)
};

struct FakeCall {
  std::string kind;  // "reduce_scatter" | "allreduce" | "allgather"
  size_t count;      // elements this member sent into the call
};

class FakeGroup final : public HierarchyGroup {
 public:
  FakeGroup(std::shared_ptr<FakeGroupState> state, int member)
      : state_(std::move(state)), member_(member) {}
  int rank() const override { return member_; }
  int size() const override { return state_->size(); }
  const std::vector<FakeCall>& calls() const { return calls_; }

  void ReduceScatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override {
    const size_t es = ElementSize(dtype);
    size_t total = 0, mine_at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      if (static_cast<int>(r) == member_) mine_at = total;
      total += counts[r];
    }
    calls_.push_back({"reduce_scatter", total});
    auto all = Exchange(in, total * es);
    const size_t n = counts[static_cast<size_t>(member_)];
    if (n == 0) return;
    std::memcpy(out, all[0].data() + mine_at * es, n * es);
    for (size_t r = 1; r < all.size(); ++r) {
      Reduce(out, out, all[r].data() + mine_at * es, n, dtype, op);
    }
  }

  void Allgather(const void* in, void* out, const std::vector<size_t>& counts,
                 DataType dtype) override {
    const size_t es = ElementSize(dtype);
    const size_t n = counts[static_cast<size_t>(member_)];
    calls_.push_back({"allgather", n});
    auto all = Exchange(in, n * es);
    auto* dst = static_cast<unsigned char*>(out);
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].size() != counts[r] * es) {
        throw Error(MismatchError("fake allgather: member " + std::to_string(r) + " sent " +
                                  std::to_string(all[r].size()) + " bytes"));
      }
      if (!all[r].empty()) std::memcpy(dst, all[r].data(), all[r].size());
      dst += all[r].size();
    }
  }

  void Allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) override {
    const size_t es = ElementSize(dtype);
    calls_.push_back({"allreduce", count});
    auto all = Exchange(buffer, count * es);
    if (count == 0) return;
    std::memcpy(buffer, all[0].data(), count * es);
    for (size_t r = 1; r < all.size(); ++r) Reduce(buffer, buffer, all[r].data(), count, dtype, op);
  }

 private:
  std::vector<FakeGroupState::Bytes> Exchange(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    FakeGroupState::Bytes mine;
    if (bytes) mine.assign(p, p + bytes);
    return state_->Exchange(member_, round_++, std::move(mine));
  }

  std::shared_ptr<FakeGroupState> state_;
  const int member_;
  uint64_t round_ = 0;
  std::vector<FakeCall> calls_;
};

}  // namespace cadre::comm::testing
