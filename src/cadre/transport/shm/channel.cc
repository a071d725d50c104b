#include "cadre/transport/shm/channel.h"

#include <algorithm>
#include <cstring>

namespace cadre::transport::shm {

Channel::Channel(void* base, size_t capacity)
    : counters_(static_cast<ChannelCounters*>(base)),
      data_(static_cast<uint8_t*>(base) + sizeof(ChannelCounters)),
      capacity_(capacity) {}

size_t Channel::Footprint(size_t capacity) { return sizeof(ChannelCounters) + capacity; }

bool Channel::Consistent() const {
  const uint64_t r = counters_->read.load(std::memory_order_acquire);
  const uint64_t w = counters_->written.load(std::memory_order_acquire);
  return w - r <= capacity_;
}

size_t Channel::Write(const uint8_t* src, size_t n) {
  const uint64_t w = counters_->written.load(std::memory_order_relaxed);  // ours alone
  const uint64_t r = counters_->read.load(std::memory_order_acquire);
  if (w - r > capacity_) return 0;  // inconsistent: Consistent() says so
  const size_t k = std::min<uint64_t>(n, capacity_ - (w - r));
  if (k == 0) return 0;
  const size_t at = w & (capacity_ - 1);
  const size_t first = std::min(k, capacity_ - at);
  std::memcpy(data_ + at, src, first);
  std::memcpy(data_, src + first, k - first);
  counters_->written.store(w + k, std::memory_order_release);
  return k;
}

size_t Channel::Read(uint8_t* dst, size_t n) {
  const uint64_t r = counters_->read.load(std::memory_order_relaxed);  // ours alone
  const uint64_t w = counters_->written.load(std::memory_order_acquire);
  if (w - r > capacity_) return 0;
  const size_t k = std::min<uint64_t>(n, w - r);
  if (k == 0) return 0;
  const size_t at = r & (capacity_ - 1);
  const size_t first = std::min(k, capacity_ - at);
  std::memcpy(dst, data_ + at, first);
  std::memcpy(dst + first, data_, k - first);
  counters_->read.store(r + k, std::memory_order_release);
  return k;
}

}  // namespace cadre::transport::shm
