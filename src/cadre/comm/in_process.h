// InProcessGroup: threads of one process as ranks (c10d's FakeProcessGroup idea), each rank an
// ExchangeCommunicator whose exchanges meet in memory. Make one group, then one Member per rank
// (each used by its own thread). No transport and no rendezvous: a member is ready at once, even
// before the other ranks' threads exist. A rank that does not arrive within the timeout fails the
// others, naming it; a rank that called Abort() (a "crash") fails everyone waiting with kIo naming
// it. Subgroups of the members are in-process groups too (made by the first member to ask).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cadre/comm/exchange_communicator.h"

namespace cadre::comm {

class InProcessGroup : public std::enable_shared_from_this<InProcessGroup> {
 public:
  static std::shared_ptr<InProcessGroup> Create(int size, Duration timeout);
  // Rank `rank`'s communicator; it keeps the group alive.
  std::unique_ptr<Communicator> Member(int rank);
  void Abort(int rank);

 private:
  using Bytes = ExchangeCommunicator::Bytes;
  class RankCommunicator;
  InProcessGroup(int size, Duration timeout) : size_(size), timeout_(timeout) {}
  std::vector<Bytes> Exchange(int rank, uint64_t round, Bytes mine);
  std::shared_ptr<InProcessGroup> Subgroup(const std::string& name, int size);

  const int size_;
  const Duration timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Round {
    std::vector<Bytes> data;
    std::vector<bool> arrived;
    int arrived_count = 0;
    int taken = 0;
  };
  std::map<uint64_t, Round> rounds_;  // GUARDED_BY(mu_); erased once every rank took its copy
  int aborted_rank_ = -1;             // GUARDED_BY(mu_)
  std::map<std::string, std::shared_ptr<InProcessGroup>> subgroups_;  // GUARDED_BY(mu_)
};

}  // namespace cadre::comm
