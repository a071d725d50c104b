// HashStore: an in-memory Store for ranks that are threads of one process (tests, benchmarks).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "cadre/store/store.h"

namespace cadre::store {

class HashStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;

 private:
  bool HasAllLocked(const std::vector<std::string>& keys) const;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;  // GUARDED_BY(mu_)
};

}  // namespace cadre::store
