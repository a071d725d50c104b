// Store: the small key-value service ranks rendezvous through (addresses, tokens, barriers).
//
// Contract: set() overwrites; get() waits until the key exists or the store's timeout passes;
// add() atomically adds to an integer counter (created at 0) and returns the new value; wait()
// blocks until every key exists. Timeouts raise cadre::Error with Code::kTimeout naming the
// missing keys. Implementations are thread-safe: many ranks (threads) may share one store.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"

namespace cadre::store {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  static constexpr Duration kDefaultTimeout = std::chrono::seconds(60);

  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  virtual Bytes get(const std::string& key) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // True when every key exists, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  Duration timeout() const { return timeout_; }
  void set_timeout(Duration timeout) { timeout_ = timeout; }

  // Conveniences for string values.
  void set_string(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 protected:
  Duration timeout_ = kDefaultTimeout;
};

}  // namespace cadre::store
