// PrefixStore: a view of another store in which every key is prefixed ("job/1/" + key), so that
// independent groups (communicators, process sets) share one store without clashing.
#pragma once

#include <memory>

#include "cadre/store/store.h"

namespace cadre::store {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;

 private:
  std::string Key(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> Keys(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace cadre::store
