// StoreCommunicator: an ExchangeCommunicator whose exchanges go through a store::Store (a TcpStore
// between processes). Each exchange round r writes key "<r>/<rank>" and reads every rank's key of
// that round. It needs nothing but the rendezvous store, so it works before (or without) the
// communication core — at the price of moving every byte through the store server, and of keys
// that are never deleted (the Store interface has no delete): use it for tests and small jobs.
// Failures: a rank that does not write its key within the timeout is named in the error.
// Subgroups live under "group/<name>/" of the store.
#pragma once

#include <memory>

#include "cadre/comm/exchange_communicator.h"
#include "cadre/store/store.h"

namespace cadre::comm {

class StoreCommunicator final : public ExchangeCommunicator {
 public:
  StoreCommunicator(std::shared_ptr<store::Store> store, int rank, int size, Duration timeout);
  std::unique_ptr<Communicator> Subgroup(const std::vector<int>& ranks,
                                         const std::string& name) override;

 protected:
  std::vector<Bytes> ExchangeBytes(Bytes mine) override;

 private:
  std::shared_ptr<store::Store> store_;
  uint64_t round_ = 0;
};

}  // namespace cadre::comm
