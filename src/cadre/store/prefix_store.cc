#include "cadre/store/prefix_store.h"

namespace cadre::store {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  timeout_ = inner_->timeout();
}

void PrefixStore::set(const std::string& key, const Bytes& value) { inner_->set(Key(key), value); }

Bytes PrefixStore::get(const std::string& key) {
  inner_->wait({Key(key)}, timeout());
  return inner_->get(Key(key));
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return inner_->add(Key(key), delta);
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return inner_->check(Keys(keys)); }

void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  inner_->wait(Keys(keys), timeout);
}

std::vector<std::string> PrefixStore::Keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(Key(k));
  return out;
}

}  // namespace cadre::store
