#include "cadre/store/hash_store.h"

#include <cstring>

#include "cadre/base/status.h"
#include "cadre/store/store_util.h"

namespace cadre::store {

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  wait({key}, timeout());
  std::lock_guard<std::mutex> lock(mu_);
  return data_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) value = DecodeCounter(key, it->second);
    value += delta;
    data_[key] = EncodeCounter(value);
  }
  cv_.notify_all();
  return value;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return HasAllLocked(keys);
}

void HashStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return HasAllLocked(keys); })) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!data_.count(k)) missing.push_back(k);
    }
    throw Error(TimeoutError(MissingKeysMessage(missing, timeout)));
  }
}

bool HashStore::HasAllLocked(const std::vector<std::string>& keys) const {
  for (const auto& k : keys) {
    if (!data_.count(k)) return false;
  }
  return true;
}

}  // namespace cadre::store
