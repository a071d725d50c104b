// SharedSegment: a named POSIX shared-memory mapping that the ranks on one host all map.
//
// The creator picks a unique name, sizes the file and maps it; the others open the same name.
// Once every rank has mapped it the creator unlinks the name, so nothing is left in /dev/shm
// even if a rank is later killed. Ownership: the mapping is unmapped on destruction; move-only.
#pragma once

#include <cstddef>
#include <string>

#include "cadre/base/status.h"

namespace cadre::transport::shm {

class SharedSegment {
 public:
  SharedSegment() = default;
  ~SharedSegment();
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  // Creates a zero-filled segment of `bytes` under a fresh unique name (see name()).
  static Status Create(size_t bytes, SharedSegment* out);
  // Maps an existing segment; fails with kIo naming the segment when it is gone or too small.
  static Status Open(const std::string& name, size_t bytes, SharedSegment* out);

  // Removes the name from /dev/shm; existing mappings stay valid. Idempotent.
  void Unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void Reset();

  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;  // created it, so unlinks it
};

}  // namespace cadre::transport::shm
