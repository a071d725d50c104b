// WireWriter / WireReader: bounds-checked little-endian encoding of frame payloads
// (integers, length-prefixed byte strings). A reader never reads past its buffer: a truncated
// or inconsistent payload yields a kProtocol Status naming the field, never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::net {

class WireWriter {
 public:
  void PutU8(uint8_t v);
  void PutU32(uint32_t v);
  void PutU64(uint64_t v);
  void PutI64(int64_t v) { PutU64(static_cast<uint64_t>(v)); }
  // u32 length, then the bytes.
  void PutBytes(std::span<const uint8_t> bytes);
  void PutString(std::string_view s);
  // Bytes with no length prefix (fixed-size fields such as nonces).
  void PutRaw(std::span<const uint8_t> bytes);

  const std::vector<uint8_t>& data() const { return data_; }
  std::vector<uint8_t> Take() { return std::move(data_); }

 private:
  std::vector<uint8_t> data_;
};

class WireReader {
 public:
  explicit WireReader(std::span<const uint8_t> data) : data_(data) {}

  // Each Get names `field` in its error ("truncated payload reading 'key'").
  Status GetU8(std::string_view field, uint8_t* v);
  Status GetU32(std::string_view field, uint32_t* v);
  Status GetU64(std::string_view field, uint64_t* v);
  Status GetI64(std::string_view field, int64_t* v);
  // Fails when the declared length exceeds the bytes left or `max_len`.
  Status GetBytes(std::string_view field, size_t max_len, std::vector<uint8_t>* v);
  Status GetString(std::string_view field, size_t max_len, std::string* v);
  Status GetRaw(std::string_view field, size_t len, std::span<const uint8_t>* v);
  // Fails when bytes are left over (a payload longer than its type allows).
  Status ExpectEnd(std::string_view what) const;

  size_t remaining() const { return data_.size() - pos_; }

 private:
  Status Need(std::string_view field, size_t n) const;

  std::span<const uint8_t> data_;
  size_t pos_ = 0;
};

}  // namespace cadre::net
