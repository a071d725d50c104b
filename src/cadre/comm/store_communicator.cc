#include "cadre/comm/store_communicator.h"

#include <string>

#include "cadre/store/prefix_store.h"

namespace cadre::comm {

StoreCommunicator::StoreCommunicator(std::shared_ptr<store::Store> store, int rank, int size,
                                     Duration timeout)
    : ExchangeCommunicator(rank, size, timeout, "store"), store_(std::move(store)) {
  if (!store_) throw Error(InvalidArgument("StoreCommunicator needs a store"));
}

std::unique_ptr<Communicator> StoreCommunicator::Subgroup(const std::vector<int>& ranks,
                                                          const std::string& name) {
  CheckUsable();
  const int index = SubgroupIndex(ranks, name);
  return std::make_unique<StoreCommunicator>(
      std::make_shared<store::PrefixStore>("group/" + name, store_), index,
      static_cast<int>(ranks.size()), timeout());
}

std::vector<ExchangeCommunicator::Bytes> StoreCommunicator::ExchangeBytes(Bytes mine) {
  const std::string prefix = std::to_string(round_++) + "/";
  store_->set(prefix + std::to_string(rank()), mine);
  std::vector<Bytes> all(static_cast<size_t>(size()));
  all[rank()] = std::move(mine);
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    const std::string key = prefix + std::to_string(r);
    try {
      store_->wait({key}, timeout());
      all[r] = store_->get(key);
    } catch (const Error& e) {
      throw Error(Status(e.code(), "rank " + std::to_string(r) + " did not take part in exchange " +
                                       prefix + " within " + std::to_string(timeout().count()) +
                                       " ms (it may have died): " + e.what()));
    }
  }
  return all;
}

}  // namespace cadre::comm
