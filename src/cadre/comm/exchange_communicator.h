// ExchangeCommunicator: a Communicator whose every collective is derived from one primitive,
// ExchangeBytes (every rank gets every rank's bytes), the reduction done locally in rank order on
// every rank (so all get bit-identical results). Simple and obviously correct, with O(size)
// traffic per rank: for tests, bring-up and groups of one, not for speed. Implementations:
// InProcessGroup (in_process.h) and StoreCommunicator (store_communicator.h).
//
// Its ranks all count as one host (`host` in the constructor): Local() is the communicator
// itself, Cross() a group of one, and the hierarchical algorithm never runs here. Per-call
// timeouts are not used: the exchange has its own (the constructor's).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/comm/communicator.h"

namespace cadre::comm {

class ExchangeCommunicator : public Communicator {
 public:
  using Bytes = std::vector<uint8_t>;

  ExchangeCommunicator(int rank, int size, Duration timeout, const std::string& host);
  ~ExchangeCommunicator() override;

  const Topology& topology() const override { return topology_; }
  Duration timeout() const override { return timeout_; }
  Communicator& Local() override { return *this; }
  Communicator& Cross() override;

  void CheckUsable() const override;
  bool HierarchicalPossible() const override { return false; }
  bool StreamsPieces() const override { return false; }
  void RunAllreduce(const AllreduceOptions& options) override;
  void RunStreamedAllreduce(const StreamedAllreduceOptions& options) override;
  void RunBroadcast(const BroadcastOptions& options) override;
  void RunAllgather(const AllgatherOptions& options) override;
  void RunReduceScatter(const ReduceScatterOptions& options) override;
  void RunAlltoall(const AlltoallOptions& options) override;
  void RunBarrier(std::optional<Duration> timeout) override;

 protected:
  // Returns every rank's `mine`, indexed by rank. Throws cadre::Error on failure or timeout,
  // naming the rank at fault.
  virtual std::vector<Bytes> ExchangeBytes(Bytes mine) = 0;

 private:
  // ExchangeBytes, breaking the communicator when it (or the caller's check) throws.
  std::vector<Bytes> Exchange(Bytes mine);
  [[noreturn]] void Fail(const Status& s);

  Topology topology_;
  const Duration timeout_;
  std::unique_ptr<Communicator> cross_;
  Status broken_;
};

}  // namespace cadre::comm
