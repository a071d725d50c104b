// Channel: one direction between two ranks of one host, a single-producer single-consumer byte
// ring in shared memory (the memory belongs to a ShmMesh, see mesh.h).
//
// The producer advances `written` and the consumer `read`, both counting bytes since the start and
// never wrapping (64 bits), so the ring holds written - read bytes and never more than its
// capacity. Each side publishes its counter with release and reads the other's with acquire, so
// the bytes are visible before the counter that announces them.
//
// Thread-safety: one producer and one consumer (threads or processes) per channel.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace cadre::transport::shm {

struct ChannelCounters {
  alignas(64) std::atomic<uint64_t> written{0};
  alignas(64) std::atomic<uint64_t> read{0};
};

class Channel {
 public:
  Channel() = default;
  // `base` holds the counters, then `capacity` bytes (a power of two) of ring.
  Channel(void* base, size_t capacity);
  // Bytes of shared memory one channel of `capacity` occupies (counters included).
  static size_t Footprint(size_t capacity);

  // Producer: copies up to `n` bytes from `src`, as many as there is room for; returns how many.
  size_t Write(const uint8_t* src, size_t n);
  // Consumer: copies up to `n` bytes to `dst`, as many as are there; returns how many.
  size_t Read(uint8_t* dst, size_t n);
  // Whether the counters describe a possible ring (a peer that scribbled over them does not).
  bool Consistent() const;

 private:
  ChannelCounters* counters_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace cadre::transport::shm
