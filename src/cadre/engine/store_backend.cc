#include "cadre/engine/store_backend.h"

#include <string>

#include "cadre/base/status.h"

namespace cadre::engine {

StoreBackend::StoreBackend(std::shared_ptr<store::Store> store, int rank, int size,
                           Duration timeout)
    : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(InvalidArgument("StoreBackend: rank " + std::to_string(rank) +
                                " out of range for size " + std::to_string(size)));
  }
}

std::vector<GatherBackend::Bytes> StoreBackend::ExchangeBytes(Bytes mine) {
  const std::string prefix = std::to_string(round_++) + "/";
  store_->set(prefix + std::to_string(rank_), mine);
  std::vector<Bytes> all(size_);
  all[rank_] = std::move(mine);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const std::string key = prefix + std::to_string(r);
    try {
      store_->wait({key}, timeout_);
      all[r] = store_->get(key);
    } catch (const Error& e) {
      throw Error(Status(e.code(), "rank " + std::to_string(r) + " did not take part in exchange " +
                                       prefix + " within " + std::to_string(timeout_.count()) +
                                       " ms (it may have died): " + e.what()));
    }
  }
  return all;
}

}  // namespace cadre::engine
