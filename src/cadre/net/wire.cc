#include "cadre/net/wire.h"

namespace cadre::net {

void WireWriter::PutU8(uint8_t v) { data_.push_back(v); }

void WireWriter::PutU32(uint32_t v) {
  for (int i = 0; i < 4; ++i) data_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void WireWriter::PutU64(uint64_t v) {
  for (int i = 0; i < 8; ++i) data_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void WireWriter::PutBytes(std::span<const uint8_t> bytes) {
  PutU32(static_cast<uint32_t>(bytes.size()));
  PutRaw(bytes);
}

void WireWriter::PutString(std::string_view s) {
  PutBytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

void WireWriter::PutRaw(std::span<const uint8_t> bytes) {
  data_.insert(data_.end(), bytes.begin(), bytes.end());
}

Status WireReader::Need(std::string_view field, size_t n) const {
  if (remaining() < n) {
    return ProtocolError("truncated payload reading '" + std::string(field) + "': needs " +
                         std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left");
  }
  return Status::Ok();
}

Status WireReader::GetU8(std::string_view field, uint8_t* v) {
  CADRE_RETURN_IF_ERROR(Need(field, 1));
  *v = data_[pos_++];
  return Status::Ok();
}

Status WireReader::GetU32(std::string_view field, uint32_t* v) {
  CADRE_RETURN_IF_ERROR(Need(field, 4));
  uint32_t out = 0;
  for (int i = 3; i >= 0; --i) out = (out << 8) | data_[pos_ + static_cast<size_t>(i)];
  pos_ += 4;
  *v = out;
  return Status::Ok();
}

Status WireReader::GetU64(std::string_view field, uint64_t* v) {
  CADRE_RETURN_IF_ERROR(Need(field, 8));
  uint64_t out = 0;
  for (int i = 7; i >= 0; --i) out = (out << 8) | data_[pos_ + static_cast<size_t>(i)];
  pos_ += 8;
  *v = out;
  return Status::Ok();
}

Status WireReader::GetI64(std::string_view field, int64_t* v) {
  uint64_t u = 0;
  CADRE_RETURN_IF_ERROR(GetU64(field, &u));
  *v = static_cast<int64_t>(u);
  return Status::Ok();
}

Status WireReader::GetRaw(std::string_view field, size_t len, std::span<const uint8_t>* v) {
  CADRE_RETURN_IF_ERROR(Need(field, len));
  *v = data_.subspan(pos_, len);
  pos_ += len;
  return Status::Ok();
}

Status WireReader::GetBytes(std::string_view field, size_t max_len, std::vector<uint8_t>* v) {
  uint32_t len = 0;
  CADRE_RETURN_IF_ERROR(GetU32(field, &len));
  if (len > max_len) {
    return ProtocolError("'" + std::string(field) + "' is " + std::to_string(len) +
                         " bytes, more than the limit of " + std::to_string(max_len));
  }
  std::span<const uint8_t> raw;
  CADRE_RETURN_IF_ERROR(GetRaw(field, len, &raw));
  v->assign(raw.begin(), raw.end());
  return Status::Ok();
}

Status WireReader::GetString(std::string_view field, size_t max_len, std::string* v) {
  std::vector<uint8_t> bytes;
  CADRE_RETURN_IF_ERROR(GetBytes(field, max_len, &bytes));
  v->assign(bytes.begin(), bytes.end());
  return Status::Ok();
}

Status WireReader::ExpectEnd(std::string_view what) const {
  if (remaining() != 0) {
    return ProtocolError(std::string(what) + " has " + std::to_string(remaining()) +
                         " unexpected trailing bytes");
  }
  return Status::Ok();
}

}  // namespace cadre::net
