#include "cadre/transport/shm/pair.h"

#include <cstring>

#include "cadre/transport/message.h"

namespace cadre::transport::shm {
ShmPair::ShmPair(int peer, std::string name, Channel out, Channel in)
    : peer_(peer), name_(std::move(name)), out_(out), in_(in) {}

void ShmPair::SetCollective(uint32_t digest, const std::string* description) {
  digest_ = digest;
  collective_ = description;
}

void ShmPair::QueueSend(const void* data, size_t bytes) {
  Op op;
  op.data = static_cast<uint8_t*>(const_cast<void*>(data));
  op.bytes = bytes;
  const uint64_t tag = MessageTag(digest_, ++send_seq_);
  const uint64_t length = bytes;
  std::memcpy(op.header, &tag, 8);
  std::memcpy(op.header + 8, &length, 8);
  sends_.push_back(op);
}

void ShmPair::QueueRecv(void* data, size_t bytes) {
  Op op;
  op.data = static_cast<uint8_t*>(data);
  op.bytes = bytes;
  op.digest = digest_;
  recvs_.push_back(op);
}

size_t ShmPair::send_left() const {
  size_t n = 0;
  for (const Op& op : sends_) n += op.bytes + kHeaderBytes - op.done;
  return n;
}

size_t ShmPair::recv_left() const {
  size_t n = 0;
  for (const Op& op : recvs_) n += op.bytes + kHeaderBytes - op.done;
  return n;
}

void ShmPair::Clear() {
  sends_.clear();
  recvs_.clear();
}

Status ShmPair::Corrupt() const {
  return ProtocolError("the shared-memory ring between this rank and " + name_ +
                       " is corrupt (its counters say it holds more than it can)");
}

Status ShmPair::ProgressSend(bool* moved) {
  while (!sends_.empty()) {
    Op& op = sends_.front();
    size_t n = 0;
    if (op.done < kHeaderBytes) {
      n = out_.Write(op.header + op.done, kHeaderBytes - op.done);
    } else {
      const size_t pdone = op.done - kHeaderBytes;
      n = out_.Write(op.data + pdone, op.bytes - pdone);
    }
    if (n == 0) return out_.Consistent() ? Status::Ok() : Corrupt();
    *moved = true;
    op.done += n;
    if (op.done == kHeaderBytes + op.bytes) sends_.pop_front();
  }
  return Status::Ok();
}

Status ShmPair::HeaderReceived(Op& op) {
  uint64_t tag = 0, length = 0;
  std::memcpy(&tag, op.header, 8);
  std::memcpy(&length, op.header + 8, 8);
  return CheckMessage(name_, tag, length, op.digest, op.bytes, collective_, &recv_seq_);
}

Status ShmPair::ProgressRecv(bool* moved) {
  while (!recvs_.empty()) {
    Op& op = recvs_.front();
    size_t n = 0;
    const bool had_header = op.done >= kHeaderBytes;
    if (!had_header) {
      n = in_.Read(op.header + op.done, kHeaderBytes - op.done);
    } else {
      const size_t pdone = op.done - kHeaderBytes;
      n = in_.Read(op.data + pdone, op.bytes - pdone);
    }
    if (n == 0) return in_.Consistent() ? Status::Ok() : Corrupt();
    *moved = true;
    op.done += n;
    if (!had_header && op.done >= kHeaderBytes) CADRE_RETURN_IF_ERROR(HeaderReceived(op));
    if (op.done == kHeaderBytes + op.bytes) {
      recvs_.pop_front();
      ++recvs_done_;
    }
  }
  return Status::Ok();
}

}  // namespace cadre::transport::shm
