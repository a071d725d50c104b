#include "cadre/transport/tcp/pair.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "cadre/transport/message.h"

namespace cadre::transport::tcp {

TcpPair::TcpPair(int peer, std::string name, net::Socket socket)
    : peer_(peer), name_(std::move(name)), socket_(std::move(socket)) {}

Status TcpPair::Broken(const std::string& what) const {
  // A rank that fails closes its connections on purpose too (comm's Fail): the group's first
  // failure, when the store can share it, then says which of these it was.
  return IoError(what + " (" + name_ +
                 "'s process exited or died, the link to it broke, or it failed and closed its "
                 "connections)");
}

void TcpPair::SetCollective(uint32_t digest, const std::string* description) {
  digest_ = digest;
  collective_ = description;
}

void TcpPair::QueueSend(const void* data, size_t bytes) {
  Op op;
  op.data = static_cast<uint8_t*>(const_cast<void*>(data));
  op.bytes = bytes;
  net::FrameHeader h;
  h.type = frame_type::kData;
  h.tag = MessageTag(digest_, ++send_seq_);
  h.length = bytes;
  net::EncodeFrameHeader(h, op.header);
  sends_.push_back(op);
}

void TcpPair::QueueRecv(void* data, size_t bytes) {
  Op op;
  op.data = static_cast<uint8_t*>(data);
  op.bytes = bytes;
  op.digest = digest_;
  recvs_.push_back(op);
}

size_t TcpPair::send_left() const {
  size_t n = 0;
  for (const Op& op : sends_) n += op.bytes + net::kFrameHeaderSize - op.done;
  return n;
}

size_t TcpPair::recv_left() const {
  size_t n = 0;
  for (const Op& op : recvs_) n += op.bytes + net::kFrameHeaderSize - op.done;
  return n;
}

void TcpPair::Clear() {
  sends_.clear();
  recvs_.clear();
}

Status TcpPair::ProgressSend() {
  while (!sends_.empty()) {
    Op& op = sends_.front();
    constexpr size_t kH = net::kFrameHeaderSize;
    iovec iov[2];
    int n = 0;
    if (op.done < kH) iov[n++] = {op.header + op.done, kH - op.done};
    size_t pdone = op.done > kH ? op.done - kH : 0;
    if (pdone < op.bytes) iov[n++] = {op.data + pdone, op.bytes - pdone};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t sent = sendmsg(socket_.fd(), &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      if (errno == EINTR) continue;
      return Broken("sending to " + name_ + " failed: " + std::strerror(errno));
    }
    op.done += static_cast<size_t>(sent);
    if (op.done == kH + op.bytes) sends_.pop_front();
  }
  return Status::Ok();
}

Status TcpPair::HeaderReceived(Op& op) {
  net::FrameHeader h;
  Status s = net::DecodeFrameHeader({op.header, net::kFrameHeaderSize}, UINT64_MAX, &h);
  if (!s.ok()) return ProtocolError(name_ + " sent a malformed frame: " + s.message());
  if (h.type != frame_type::kData) {
    return ProtocolError(name_ + " sent a frame of type " + std::to_string(h.type) +
                         ", expected transport data");
  }
  return CheckMessage(name_, h.tag, h.length, op.digest, op.bytes, collective_, &recv_seq_);
}

Status TcpPair::ProgressRecv() {
  constexpr size_t kH = net::kFrameHeaderSize;
  while (!recvs_.empty()) {
    Op& op = recvs_.front();
    size_t got = 0;
    Status s;
    if (op.done < kH) {
      s = socket_.RecvSome(op.header + op.done, kH - op.done, &got);
    } else {
      size_t pdone = op.done - kH;
      s = socket_.RecvSome(op.data + pdone, op.bytes - pdone, &got);
    }
    if (!s.ok()) return Broken("receiving from " + name_ + " failed: " + s.message());
    if (got == 0) return Status::Ok();
    bool had_header = op.done >= kH;
    op.done += got;
    if (!had_header && op.done >= kH) CADRE_RETURN_IF_ERROR(HeaderReceived(op));
    if (op.done == kH + op.bytes) {
      recvs_.pop_front();
      ++recvs_done_;
    }
  }
  return Status::Ok();
}

}  // namespace cadre::transport::tcp
