#include "cadre/comm/in_process.h"

#include <string>

#include "cadre/base/deadline.h"

namespace cadre::comm {

class InProcessGroup::RankCommunicator final : public ExchangeCommunicator {
 public:
  RankCommunicator(std::shared_ptr<InProcessGroup> group, int rank)
      : ExchangeCommunicator(rank, group->size_, group->timeout_, "in-process"),
        group_(std::move(group)) {}

  std::unique_ptr<Communicator> Subgroup(const std::vector<int>& ranks,
                                         const std::string& name) override {
    CheckUsable();
    const int index = SubgroupIndex(ranks, name);
    return group_->Subgroup(name, static_cast<int>(ranks.size()))->Member(index);
  }

 protected:
  std::vector<Bytes> ExchangeBytes(Bytes mine) override {
    return group_->Exchange(rank(), round_++, std::move(mine));
  }

 private:
  std::shared_ptr<InProcessGroup> group_;
  uint64_t round_ = 0;
};

std::shared_ptr<InProcessGroup> InProcessGroup::Create(int size, Duration timeout) {
  if (size < 1) throw Error(InvalidArgument("InProcessGroup: size must be >= 1"));
  return std::shared_ptr<InProcessGroup>(new InProcessGroup(size, timeout));
}

std::unique_ptr<Communicator> InProcessGroup::Member(int rank) {
  if (rank < 0 || rank >= size_) {
    throw Error(InvalidArgument("InProcessGroup: rank " + std::to_string(rank) + " out of range"));
  }
  return std::make_unique<RankCommunicator>(shared_from_this(), rank);
}

std::shared_ptr<InProcessGroup> InProcessGroup::Subgroup(const std::string& name, int size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& group = subgroups_[name];
  if (!group) group = Create(size, timeout_);
  if (group->size_ != size) {
    throw Error(InvalidArgument("subgroup '" + name + "' was made with " +
                                std::to_string(group->size_) + " ranks, now asked for with " +
                                std::to_string(size)));
  }
  return group;
}

void InProcessGroup::Abort(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_rank_ < 0) aborted_rank_ = rank;
  cv_.notify_all();
}

std::vector<InProcessGroup::Bytes> InProcessGroup::Exchange(int rank, uint64_t round, Bytes mine) {
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
  std::vector<Bytes> result = r.data;
  if (++r.taken == size_) rounds_.erase(round);
  return result;
}

}  // namespace cadre::comm
