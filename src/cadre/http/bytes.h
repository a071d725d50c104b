// Bytes: what was read from a connection and not yet used. Reads go straight into it (no
// zero-filling, no copy through another buffer) and are taken from the front, so that the lobby,
// a worker waiting for the next request and cpp-httplib's parser share one buffer.
//
// Thread-safety: none; a connection is handled by one thread at a time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string_view>

namespace cadre::http {

class Bytes {
 public:
  bool empty() const { return begin_ == end_; }
  size_t size() const { return end_ - begin_; }
  std::string_view view() const { return {data_.get() + begin_, size()}; }

  // Room for `n` more bytes at the back; Commit() then says how many were written there.
  char* Room(size_t n) {
    if (cap_ - end_ < n) {
      const size_t used = size();
      if (cap_ - used >= n) {
        std::memmove(data_.get(), data_.get() + begin_, used);
      } else {
        const size_t cap = std::max(cap_ * 2, used + n);
        auto data = std::make_unique_for_overwrite<char[]>(cap);
        if (used > 0) std::memcpy(data.get(), data_.get() + begin_, used);
        data_ = std::move(data);
        cap_ = cap;
      }
      begin_ = 0;
      end_ = used;
    }
    return data_.get() + end_;
  }
  void Commit(size_t n) { end_ += n; }

  // Takes `n` bytes (at most size()) from the front into `out`.
  void Take(char* out, size_t n) {
    std::memcpy(out, data_.get() + begin_, n);
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }

  // Frees the memory (what is held is dropped).
  void Release() {
    data_.reset();
    cap_ = begin_ = end_ = 0;
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t cap_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace cadre::http
