#include "cadre/transport/tcp/pair.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cadre/transport/message.h"

namespace cadre::transport::tcp {

TcpPair::TcpPair(int peer, std::string name, net::Socket socket)
    : peer_(peer), name_(std::move(name)), socket_(std::move(socket)) {}

Status TcpPair::Broken(const std::string& what) const {
  // A rank that fails closes its connections on purpose too (comm's Fail), after its notice:
  // ExplainBrokenConnection tells the cases apart when it can.
  return IoError(what + " (" + name_ +
                 "'s process exited or died, the link to it broke, or it failed and closed its "
                 "connections)");
}

namespace {

// How long the failed pair's end is read for, and the others' after it, at most.
constexpr auto kEndWait = std::chrono::milliseconds(100);
constexpr auto kOthersWait = std::chrono::milliseconds(250);

std::string NoNotice(const std::string& names, bool several) {
  return names + (several ? " closed their connections" : " closed its connection") +
         " without a failure notice: " + (several ? "their processes" : "its process") +
         " exited or died, or the link broke";
}

}  // namespace

Status ExplainBrokenConnection(TcpPair& failed, const std::vector<TcpPair*>& others,
                               const Status& error, bool* explained) {
  *explained = false;
  // The error without Broken()'s guess, where an end says which it was.
  std::string what = error.message();
  const size_t guess = what.find(" (" + failed.peer_name() + "'s process exited or died");
  const std::string plain = guess == std::string::npos ? what : what.substr(0, guess);
  switch (failed.ReadEnd(Deadline(kEndWait))) {
    case TcpPair::End::kNotice:
      *explained = failed.notice_explained();
      return Status(failed.notice().code(),
                    failed.peer_name() + " failed: " + failed.notice().message());
    case TcpPair::End::kClosed:
      *explained = true;
      return IoError(plain + ": " + NoNotice(failed.peer_name(), false));
    default:
      break;
  }
  // A break inside a frame: any of the three. The others' ends may say.
  std::vector<TcpPair*> open;
  for (TcpPair* p : others) {
    if (p != nullptr && p != &failed) open.push_back(p);
  }
  std::string closed;
  int closed_count = 0;
  TcpPair* noticed = nullptr;
  Deadline deadline(kOthersWait);
  while (!open.empty()) {
    std::vector<pollfd> fds;
    for (size_t i = 0; i < open.size();) {
      switch (open[i]->ReadEnd(Deadline(Duration::zero()))) {
        case TcpPair::End::kClosed:
          closed += (closed.empty() ? "" : ", ") + open[i]->peer_name();
          ++closed_count;
          break;
        case TcpPair::End::kNotice:
          if (noticed == nullptr) noticed = open[i];
          break;
        case TcpPair::End::kOpen:
          fds.push_back({open[i]->fd(), POLLIN, 0});
          ++i;
          continue;
        case TcpPair::End::kUnknown:
          break;
      }
      open.erase(open.begin() + static_cast<long>(i));
    }
    if (closed_count > 0 || noticed != nullptr || fds.empty() || deadline.expired()) break;
    poll(fds.data(), fds.size(), std::max(1, deadline.poll_timeout_ms()));
  }
  if (closed_count > 0) {
    *explained = true;
    return IoError(what + "; " + NoNotice(closed, closed_count > 1));
  }
  if (noticed != nullptr) {
    *explained = noticed->notice_explained();
    return Status(noticed->notice().code(),
                  what + "; " + noticed->peer_name() + " failed: " + noticed->notice().message());
  }
  return error;
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
  if (!sends_.empty() && sends_.front().done > 0) send_torn_ = true;
  if (!recvs_.empty() && recvs_.front().done > 0) recv_torn_ = true;
  sends_.clear();
  recvs_.clear();
}

void TcpPair::SendNotice(const Status& why, bool explained, Deadline deadline) {
  if (send_torn_ || notice_sent_ || !sends_.empty()) return;
  notice_sent_ = true;
  const std::string text = why.message().substr(0, kMaxNoticeBytes);
  net::FrameHeader h;
  h.type = frame_type::kFailure;
  h.flags = explained ? kNoticeExplained : 0;
  h.tag = static_cast<uint64_t>(why.code());
  h.length = text.size();
  uint8_t header[net::kFrameHeaderSize];
  net::EncodeFrameHeader(h, header);
  const iovec parts[2] = {{header, sizeof header}, {const_cast<char*>(text.data()), text.size()}};
  (void)socket_.SendAll(parts, deadline);  // a peer that cannot take it learns less
}

TcpPair::End TcpPair::ReadEnd(Deadline deadline) {
  constexpr size_t kH = net::kFrameHeaderSize;
  if (end_ != End::kOpen) return end_;
  if (recv_torn_) return end_ = End::kUnknown;
  uint8_t drop[16384];
  for (;;) {
    if (end_in_notice_ && end_text_done_ == end_text_.size()) {
      notice_ = Status(end_code_, end_text_.empty() ? "(no reason given)" : end_text_);
      return end_ = End::kNotice;
    }
    if (!end_in_notice_ && end_skip_ == 0 && end_header_done_ == kH) {
      end_header_done_ = 0;
      net::FrameHeader h;
      if (!net::DecodeFrameHeader({end_header_, kH}, UINT64_MAX, &h).ok()) {
        return end_ = End::kUnknown;
      }
      if (h.type == frame_type::kData) {
        end_skip_ = h.length;
        continue;
      }
      if (h.type != frame_type::kFailure || h.length > kMaxNoticeBytes) {
        return end_ = End::kUnknown;
      }
      const bool known = h.tag > 0 && h.tag <= static_cast<uint64_t>(Code::kInternal);
      end_code_ = known ? static_cast<Code>(h.tag) : Code::kIo;
      notice_explained_ = (h.flags & kNoticeExplained) != 0;
      end_text_.assign(h.length, '\0');
      end_text_done_ = 0;
      end_in_notice_ = true;
      continue;
    }
    size_t got = 0;
    Status s;
    if (end_in_notice_) {
      s = socket_.RecvSome(end_text_.data() + end_text_done_, end_text_.size() - end_text_done_,
                           &got);
    } else if (end_skip_ > 0) {
      s = socket_.RecvSome(drop, std::min<uint64_t>(end_skip_, sizeof drop), &got);
    } else {
      s = socket_.RecvSome(end_header_ + end_header_done_, kH - end_header_done_, &got);
    }
    if (!s.ok()) {
      // The end of the stream (or a reset) between frames, with no notice: the peer did not fail
      // as a rank fails; inside a frame or a notice: it may have.
      const bool between = !end_in_notice_ && end_skip_ == 0 && end_header_done_ == 0;
      return end_ = between ? End::kClosed : End::kUnknown;
    }
    if (got == 0) {
      if (deadline.expired() || !socket_.WaitReadable(deadline).ok()) return End::kOpen;
      continue;
    }
    if (end_in_notice_) {
      end_text_done_ += got;
    } else if (end_skip_ > 0) {
      end_skip_ -= got;
    } else {
      end_header_done_ += got;
    }
  }
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
    if (h.type == frame_type::kFailure) {
      // The peer failed and says why: ReadEnd reads the rest. Not torn: the frame begins here.
      std::memcpy(end_header_, op.header, net::kFrameHeaderSize);
      end_header_done_ = net::kFrameHeaderSize;
      op.done = 0;
      return Broken("receiving from " + name_ + " failed: it sent a failure notice");
    }
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
